//! The P4Runtime device: arbitration, the forwarding pipeline, and Write/Read of every entity,
//! translated to the p4 stage's switches. No I/O here beyond the switches' locks: the gRPC
//! service ([`crate::server`]) calls these methods and carries their results.
//!
//! # Writes
//!
//! A Write batch runs with every worker's switch locked ([`P4Control::with_all`]), so packets
//! see the tables as they were before the batch or after it: every batch is data-plane atomic,
//! whatever its atomicity. `CONTINUE_ON_ERROR` applies every update it can and reports each
//! failure; `ROLLBACK_ON_ERROR` and `DATAPLANE_ATOMIC` restore the switches and the device's
//! own state as they were before the batch when any update fails (the others are reported
//! `ABORTED`). Each update is applied to the first worker's switch, then to the others (which
//! hold the same state, so they agree).

// The specification deprecates `Replica.egress_port` and `TableEntry.controller_metadata`
// but clients still send them: both are served.
#![allow(deprecated)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

use snic_io::p4::P4Control;
use snic_p4::ir::ActionCall;
use snic_p4::table::{FieldMatch as Fm, MatchKind};
use snic_p4::v1model::{Handle, Indirect, MirrorSession, NodeHandle, RuntimeError, Switch};

use crate::p4info::Prefix;
use crate::proto::p4::v1 as p4;
use crate::schema::{Schema, TableSchema, decode, encode, pack, unpack};
use crate::status::{Code, Fail};

/// The P4Runtime API version snic implements.
pub const API_VERSION: &str = "1.4.1";

/// A StreamChannel's identity.
pub type StreamId = u64;

/// An election id.
pub type Election = u128;

/// A committed (or saved) pipeline.
#[derive(Debug, Clone)]
struct Pipeline {
    config: p4::ForwardingPipelineConfig,
    schema: Schema,
    switch: Switch,
}

/// One role's arbitration: the live streams and their election ids (`None`: unset, lower
/// than any set id, never primary).
#[derive(Debug, Default)]
struct RoleArb {
    streams: BTreeMap<StreamId, Option<Election>>,
    max_seen: Option<Election>,
}

impl RoleArb {
    /// The primary: the live stream with the highest (set) election id, when that id is the
    /// highest ever seen for the role.
    fn primary(&self) -> Option<(StreamId, Election)> {
        let (s, e) =
            self.streams.iter().filter_map(|(s, e)| e.map(|e| (*s, e))).max_by_key(|(_, e)| *e)?;
        (Some(e) >= self.max_seen).then_some((s, e))
    }
}

/// What the device keeps about a table entry beside the switch: the controller's opaque data.
#[derive(Debug, Clone, Default)]
struct Extra {
    metadata: Vec<u8>,
    controller_metadata: u64,
}

/// An action profile's members and groups, by the controller's ids.
#[derive(Debug, Clone, Default)]
struct Profile {
    /// Member id -> (the switch's member id, the action).
    members: BTreeMap<u32, (u32, p4::Action)>,
    /// Group id -> (the switch's group id, members, max size).
    groups: BTreeMap<u32, (u32, Vec<p4::action_profile_group::Member>, i32)>,
}

/// The device's own state for one pipeline (cleared when a new one is committed).
#[derive(Debug, Clone, Default)]
struct Objects {
    profiles: HashMap<u32, Profile>,
    extras: HashMap<(usize, Handle), Extra>,
    mcast: BTreeMap<u32, (Vec<p4::Replica>, Vec<NodeHandle>)>,
    clones: BTreeMap<u32, p4::CloneSessionEntry>,
    value_sets: HashMap<u32, Vec<p4::ValueSetMember>>,
    digests: BTreeMap<u32, p4::digest_entry::Config>,
}

/// The device (see the module doc).
#[derive(Debug)]
pub struct Device {
    device_id: u64,
    control: P4Control,
    include: Vec<PathBuf>,
    pipeline: Option<Pipeline>,
    /// A saved pipeline (VERIFY_AND_SAVE) and its state: writes and reads go to it until it
    /// is committed.
    saved: Option<(Pipeline, Objects)>,
    roles: BTreeMap<String, RoleArb>,
    stream_role: HashMap<StreamId, String>,
    obj: Objects,
    /// Entries some workers found idle past their time to live: the workers so far.
    idle_pending: HashMap<(usize, Handle), BTreeSet<usize>>,
}

/// Why a Read failed.
#[derive(Debug)]
pub enum ReadError {
    /// The whole request (a wrong device, no pipeline).
    Whole(Fail),
    /// Some of its entities: the good ones' results, then one result per requested entity
    /// (section 11: `UNKNOWN` with one `p4.v1.Error` each).
    Partial {
        /// What the good requests read.
        entities: Vec<p4::Entity>,
        /// One per requested entity.
        results: Vec<Result<(), Fail>>,
    },
}

/// An arbitration update to send on a stream.
pub type Notice = (StreamId, p4::MasterArbitrationUpdate);

/// The key of a table's default entry among the entries' extras (no entry has this handle).
const DEFAULT_ENTRY: Handle = Handle::MAX;

fn u128_of(e: &Option<p4::Uint128>) -> Option<Election> {
    e.as_ref().map(|e| u128::from(e.high) << 64 | u128::from(e.low))
}

fn uint128(e: Election) -> p4::Uint128 {
    p4::Uint128 { high: (e >> 64) as u64, low: e as u64 }
}

fn rt(e: RuntimeError) -> Fail {
    Fail::from(e)
}

/// Apply `f` to the first switch, then (when it succeeded) to the others.
/// A counter value written to every worker's switch: reads sum the workers' counters, so the
/// first switch takes `v` and the others start again from 0 (`first` says which call is first).
fn share(first: &mut bool, v: (u64, u64)) -> (u64, u64) {
    if core::mem::take(first) { v } else { (0, 0) }
}

fn all<T>(
    sws: &mut [&mut Switch],
    mut f: impl FnMut(&mut Switch) -> Result<T, RuntimeError>,
) -> Result<T, Fail> {
    let (first, rest) = match sws.split_first_mut() {
        Some(x) => x,
        None => return Err(Fail::new(Code::Internal, "no switch")),
    };
    let v = f(first).map_err(rt)?;
    for s in rest {
        f(s).map_err(|e| Fail::new(Code::Internal, format!("workers disagree: {e}")))?;
    }
    Ok(v)
}

impl Device {
    /// A device with id `device_id` over the p4 stage `control`; programs pushed to it find
    /// their includes in the built-ins and `include`.
    pub fn new(device_id: u64, control: P4Control, include: Vec<PathBuf>) -> Device {
        Device {
            device_id,
            control,
            include,
            pipeline: None,
            saved: None,
            roles: BTreeMap::new(),
            stream_role: HashMap::new(),
            obj: Objects::default(),
            idle_pending: HashMap::new(),
        }
    }

    /// The p4 stage's control.
    pub fn control(&self) -> &P4Control {
        &self.control
    }

    fn check_device(&self, id: u64) -> Result<(), Fail> {
        if id != self.device_id {
            return Err(Fail::new(
                Code::NotFound,
                format!("no device {id} (this is {})", self.device_id),
            ));
        }
        Ok(())
    }

    // ------------------------------------------------------------ arbitration

    /// A MasterArbitrationUpdate from `stream`. `Err`: the stream is refused (and closed);
    /// `Ok`: the updates to send, to this stream and to every other of its role.
    pub fn arbitrate(
        &mut self,
        stream: StreamId,
        m: &p4::MasterArbitrationUpdate,
    ) -> Result<Vec<Notice>, Fail> {
        let known = self.stream_role.contains_key(&stream);
        if m.device_id != self.device_id {
            // A live stream may not move to another device (rule 2.1); a new one names a
            // device that is not here.
            let code = if known { Code::FailedPrecondition } else { Code::NotFound };
            return Err(Fail::new(
                code,
                format!("no device {} (this is {})", m.device_id, self.device_id),
            ));
        }
        let e = u128_of(&m.election_id);
        let role = m.role.as_ref().map(|r| r.name.clone()).unwrap_or_default();
        if let Some(old) = self.stream_role.get(&stream)
            && *old != role
        {
            return Err(Fail::new(Code::FailedPrecondition, "a stream cannot change its role"));
        }
        let arb = self.roles.entry(role.clone()).or_default();
        if let Some(e) = e
            && arb.streams.iter().any(|(s, x)| *s != stream && *x == Some(e))
        {
            return Err(Fail::new(
                Code::InvalidArgument,
                format!("election id {e} is used by another client of role '{role}'"),
            ));
        }
        let before = arb.primary();
        arb.streams.insert(stream, e);
        if e.is_some() {
            arb.max_seen = arb.max_seen.max(e);
        }
        self.stream_role.insert(stream, role.clone());
        let after = self.roles[&role].primary();
        // Everyone of the role hears of a new primary, or of the primary asserting itself
        // again; a backup's update is answered to it alone.
        let changed = before.map(|p| p.0) != after.map(|p| p.0);
        let from_primary = after.is_some_and(|p| p.0 == stream);
        Ok(if changed || from_primary {
            self.notices(&role, None)
        } else {
            self.notices(&role, Some(stream))
        })
    }

    /// The arbitration updates for the streams of `role` (only `only` when given).
    fn notices(&self, role: &str, only: Option<StreamId>) -> Vec<Notice> {
        let Some(arb) = self.roles.get(role) else { return Vec::new() };
        let primary = arb.primary();
        // Unset while no client has ever named an election id.
        let top = arb.max_seen;
        arb.streams
            .keys()
            .filter(|s| only.is_none_or(|o| o == **s))
            .map(|s| {
                let status = match primary {
                    Some((p, _)) if p == *s => (Code::Ok, "you are the primary".to_string()),
                    Some(_) => (Code::AlreadyExists, "another client is the primary".to_string()),
                    None => (Code::NotFound, "there is no primary".to_string()),
                };
                let upd = p4::MasterArbitrationUpdate {
                    device_id: self.device_id,
                    role: (!role.is_empty())
                        .then(|| p4::Role { name: role.to_string(), ..Default::default() }),
                    election_id: top.map(uint128),
                    status: Some(crate::proto::google::rpc::Status {
                        code: status.0 as i32,
                        message: status.1,
                        details: Vec::new(),
                    }),
                };
                (*s, upd)
            })
            .collect()
    }

    /// `stream` ended: the updates for the others of its role if the primary changed.
    pub fn stream_closed(&mut self, stream: StreamId) -> Vec<Notice> {
        let Some(role) = self.stream_role.remove(&stream) else { return Vec::new() };
        let Some(arb) = self.roles.get_mut(&role) else { return Vec::new() };
        let before = arb.primary();
        arb.streams.remove(&stream);
        let after = arb.primary();
        if before.map(|p| p.0) != after.map(|p| p.0) {
            self.notices(&role, None)
        } else {
            Vec::new()
        }
    }

    /// The primary streams of every role (where packet-ins, digests and idle notifications
    /// go: without role configurations, every role has the whole pipeline).
    pub fn primary_streams(&self) -> Vec<StreamId> {
        self.roles.values().filter_map(|a| a.primary()).map(|p| p.0).collect()
    }

    fn check_primary(&self, role: &str, election: &Option<p4::Uint128>) -> Result<(), Fail> {
        let e = u128_of(election);
        let Some(arb) = self.roles.get(role) else {
            return Err(Fail::new(Code::NotFound, format!("no client has claimed role '{role}'")));
        };
        match arb.primary() {
            Some((_, p)) if Some(p) == e => Ok(()),
            _ => Err(Fail::new(
                Code::PermissionDenied,
                format!("not the primary client of role '{role}' (election id {e:?})"),
            )),
        }
    }

    // ------------------------------------------------------------ pipeline

    fn build(&self, config: &p4::ForwardingPipelineConfig) -> Result<Pipeline, Fail> {
        let Some(info) = &config.p4info else {
            return Err(Fail::new(Code::InvalidArgument, "the config has no P4Info"));
        };
        let text = String::from_utf8(config.p4_device_config.clone()).map_err(|_| {
            Fail::new(Code::InvalidArgument, "p4_device_config must be the P4 source text (UTF-8)")
        })?;
        if text.trim().is_empty() {
            return Err(Fail::new(
                Code::InvalidArgument,
                "p4_device_config is empty: send the P4 source",
            ));
        }
        let (built, _) =
            snic_io::p4::compile_source("p4_device_config.p4", text, &self.include, Vec::new())
                .map_err(|e| {
                    Fail::new(Code::InvalidArgument, format!("the program does not compile:\n{e}"))
                })?;
        let schema = Schema::bind(info, &built.program)?;
        let switch = Switch::new(built.program).map_err(|e| {
            Fail::new(Code::InvalidArgument, format!("the program cannot run: {e}"))
        })?;
        Ok(Pipeline { config: config.clone(), schema, switch })
    }

    /// Serve the program the p4 stage was started with (`--stage p4:PROG.p4`) as the pipeline,
    /// as if a client had pushed it: its P4Info is the one `snic p4 info --p4info` writes, its
    /// device config its source. The stage's switches already run it (with the entries of its
    /// `entries=` file), so they are kept, not replaced.
    pub fn preload(&mut self, path: &std::path::Path) -> Result<(), String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let (built, _) = snic_io::p4::compile_source(
            &path.display().to_string(),
            text.clone(),
            &self.include,
            Vec::new(),
        )
        .map_err(|e| e.to_string())?;
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let info = crate::p4info::for_program(&built.program, &name)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let config = p4::ForwardingPipelineConfig {
            p4info: Some(info),
            p4_device_config: text.into_bytes(),
            ..Default::default()
        };
        let p = self.build(&config).map_err(|f| format!("{}: {f}", path.display()))?;
        self.pipeline = Some(p);
        Ok(())
    }

    /// SetForwardingPipelineConfig.
    pub fn set_pipeline(
        &mut self,
        req: &p4::SetForwardingPipelineConfigRequest,
    ) -> Result<(), Fail> {
        use p4::set_forwarding_pipeline_config_request::Action as A;
        self.check_device(req.device_id)?;
        self.check_primary(&req.role, &req.election_id)?;
        let action = A::try_from(req.action).map_err(|_| {
            Fail::new(Code::InvalidArgument, format!("unknown action {}", req.action))
        })?;
        let need = |c: &Option<p4::ForwardingPipelineConfig>| {
            c.clone().ok_or_else(|| Fail::new(Code::InvalidArgument, "no config given"))
        };
        match action {
            A::Unspecified => Err(Fail::new(Code::InvalidArgument, "action is unspecified")),
            A::Verify => self.build(&need(&req.config)?).map(|_| ()),
            A::VerifyAndSave => {
                self.saved = Some((self.build(&need(&req.config)?)?, Objects::default()));
                Ok(())
            }
            A::VerifyAndCommit => {
                let p = self.build(&need(&req.config)?)?;
                self.commit(p, Objects::default());
                Ok(())
            }
            A::Commit => {
                if req.config.is_some() {
                    return Err(Fail::new(Code::InvalidArgument, "COMMIT takes no config"));
                }
                let (p, obj) = self
                    .saved
                    .take()
                    .ok_or_else(|| Fail::new(Code::NotFound, "no saved config to commit"))?;
                self.commit(p, obj);
                Ok(())
            }
            A::ReconcileAndCommit => {
                let mut p = self.build(&need(&req.config)?)?;
                let obj = self.reconcile(&mut p)?;
                self.commit(p, obj);
                Ok(())
            }
        }
    }

    fn commit(&mut self, p: Pipeline, obj: Objects) {
        self.control.replace(&p.switch);
        self.obj = obj;
        self.idle_pending.clear();
        self.saved = None;
        self.pipeline = Some(p);
    }

    /// Carry the forwarding state over to `p`: every entity read under the current pipeline
    /// is written again under the new one (same ids, by the P4Info), into `p`'s switch. Any
    /// entity that does not fit the new pipeline refuses the whole change.
    fn reconcile(&self, p: &mut Pipeline) -> Result<Objects, Fail> {
        let Some(old) = &self.pipeline else { return Ok(Objects::default()) };
        let mut entities = Vec::new();
        let wild = |e: p4::entity::Entity| p4::Entity { entity: Some(e) };
        use p4::entity::Entity as E;
        let queries = [
            wild(E::ActionProfileMember(p4::ActionProfileMember::default())),
            wild(E::ActionProfileGroup(p4::ActionProfileGroup::default())),
            wild(E::TableEntry(p4::TableEntry::default())),
            wild(E::PacketReplicationEngineEntry(p4::PacketReplicationEngineEntry {
                r#type: Some(p4::packet_replication_engine_entry::Type::MulticastGroupEntry(
                    p4::MulticastGroupEntry::default(),
                )),
            })),
            wild(E::PacketReplicationEngineEntry(p4::PacketReplicationEngineEntry {
                r#type: Some(p4::packet_replication_engine_entry::Type::CloneSessionEntry(
                    p4::CloneSessionEntry::default(),
                )),
            })),
            wild(E::ValueSetEntry(p4::ValueSetEntry::default())),
            wild(E::DigestEntry(p4::DigestEntry::default())),
        ];
        self.control.with_all(|sws| -> Result<(), Fail> {
            let snaps: Vec<Switch> = sws.iter().map(|s| (**s).clone()).collect();
            for q in &queries {
                entities.extend(read_one(old, &self.obj, &snaps, q)?);
            }
            Ok(())
        })?;
        // Const entries come with the new program; the default entries are written as MODIFY.
        let mut obj = Objects::default();
        let mut sw = p.switch.clone();
        for e in entities {
            let ty = match &e.entity {
                Some(E::TableEntry(t)) if t.is_default_action => p4::update::Type::Modify,
                Some(E::TableEntry(t)) if t.r#const => continue,
                Some(E::ValueSetEntry(_)) => p4::update::Type::Modify,
                _ => p4::update::Type::Insert,
            };
            let u = p4::Update { r#type: ty as i32, entity: Some(e) };
            apply_update(&p.schema, &mut obj, &mut [&mut sw], &u).map_err(|f| {
                Fail::new(Code::InvalidArgument, format!("cannot keep the state: {f}"))
            })?;
        }
        p.switch = sw;
        Ok(obj)
    }

    /// GetForwardingPipelineConfig.
    pub fn get_pipeline(
        &self,
        req: &p4::GetForwardingPipelineConfigRequest,
    ) -> Result<Option<p4::ForwardingPipelineConfig>, Fail> {
        use p4::get_forwarding_pipeline_config_request::ResponseType as R;
        self.check_device(req.device_id)?;
        // No pipeline: the config is left unset (section 13).
        let Some(p) = &self.pipeline else { return Ok(None) };
        let c = &p.config;
        let ty = R::try_from(req.response_type)
            .map_err(|_| Fail::new(Code::InvalidArgument, "unknown response type"))?;
        Ok(Some(match ty {
            R::All => c.clone(),
            R::CookieOnly => {
                p4::ForwardingPipelineConfig { cookie: c.cookie, ..Default::default() }
            }
            R::P4infoAndCookie => p4::ForwardingPipelineConfig {
                p4info: c.p4info.clone(),
                cookie: c.cookie,
                ..Default::default()
            },
            R::DeviceConfigAndCookie => p4::ForwardingPipelineConfig {
                p4_device_config: c.p4_device_config.clone(),
                cookie: c.cookie,
                ..Default::default()
            },
        }))
    }

    // ------------------------------------------------------------ write / read

    /// A Write batch: `Ok` when every update succeeded, else one result per update.
    pub fn write(
        &mut self,
        req: &p4::WriteRequest,
    ) -> Result<(), Result<Vec<Result<(), Fail>>, Fail>> {
        use p4::write_request::Atomicity;
        self.check_device(req.device_id).map_err(Err)?;
        self.check_primary(&req.role, &req.election_id).map_err(Err)?;
        let atomic = Atomicity::try_from(req.atomicity)
            .map_err(|_| Err(Fail::new(Code::InvalidArgument, "unknown atomicity")))?;
        let results = match &mut self.saved {
            // A saved pipeline takes the writes until it is committed (the data plane still
            // runs the committed one).
            Some((sp, sobj)) => {
                let Pipeline { schema, switch, .. } = sp;
                apply_batch(schema, sobj, &mut [switch], &req.updates, atomic)
            }
            None => {
                let Some(p) = &self.pipeline else {
                    return Err(Err(Fail::new(
                        Code::FailedPrecondition,
                        "no pipeline: set one first",
                    )));
                };
                let schema = &p.schema;
                let obj = &mut self.obj;
                let now = self.control.io().now_ns();
                self.control.with_all(|sws| {
                    // Entries' times to live start now, not at the last packet.
                    for s in sws.iter_mut() {
                        s.advance_clock(now);
                    }
                    apply_batch(schema, obj, sws, &req.updates, atomic)
                })
            }
        };
        if results.iter().all(Result::is_ok) { Ok(()) } else { Err(Ok(results)) }
    }

    /// A Read: the entities, in order.
    pub fn read(&self, req: &p4::ReadRequest) -> Result<Vec<p4::Entity>, ReadError> {
        self.check_device(req.device_id).map_err(ReadError::Whole)?;
        let (p, obj, copies);
        let sws: &[Switch] = if let Some((sp, sobj)) = &self.saved {
            (p, obj) = (sp, sobj);
            std::slice::from_ref(&sp.switch)
        } else {
            let Some(cp) = &self.pipeline else {
                return Err(ReadError::Whole(Fail::new(
                    Code::FailedPrecondition,
                    "no pipeline: set one first",
                )));
            };
            (p, obj) = (cp, &self.obj);
            // Work on a copy: a read of many entries must not hold the data plane up.
            copies = self.control.snapshots();
            &copies
        };
        let mut out = Vec::new();
        let mut results = Vec::with_capacity(req.entities.len());
        for e in &req.entities {
            match read_one(p, obj, sws, e) {
                Ok(v) => {
                    out.extend(v);
                    results.push(Ok(()));
                }
                Err(f) => results.push(Err(f)),
            }
        }
        if results.iter().all(Result::is_ok) {
            Ok(out)
        } else {
            Err(ReadError::Partial { entities: out, results })
        }
    }

    // ------------------------------------------------------------ packet I/O

    /// The frame a PacketOut becomes: the `packet_out` header built from its metadata, then
    /// the payload.
    pub fn packet_out_frame(&self, po: &p4::PacketOut) -> Result<Vec<u8>, Fail> {
        let Some(p) = &self.pipeline else {
            return Err(Fail::new(Code::FailedPrecondition, "no pipeline: set one first"));
        };
        let Some(fields) = &p.schema.packet_out else {
            if !po.metadata.is_empty() {
                return Err(Fail::new(
                    Code::InvalidArgument,
                    "the program has no packet_out header",
                ));
            }
            return Ok(po.payload.clone());
        };
        let mut vals = Vec::new();
        for (id, w) in fields {
            // Precisely one value per field of the header (section 15.1).
            let mut given = po.metadata.iter().filter(|m| m.metadata_id == *id);
            let v = match (given.next(), given.next()) {
                (Some(m), None) => decode(&m.value, *w, &format!("packet_out metadata {id}"))?,
                (None, _) => {
                    return Err(Fail::new(
                        Code::InvalidArgument,
                        format!("packet_out metadata {id} is missing"),
                    ));
                }
                (Some(_), Some(_)) => {
                    return Err(Fail::new(
                        Code::InvalidArgument,
                        format!("packet_out metadata {id} is given twice"),
                    ));
                }
            };
            vals.push((v, *w));
        }
        if let Some(m) = po.metadata.iter().find(|m| !fields.iter().any(|f| f.0 == m.metadata_id)) {
            return Err(Fail::new(
                Code::InvalidArgument,
                format!("no packet_out metadata id {}", m.metadata_id),
            ));
        }
        let mut frame = pack(&vals);
        frame.extend_from_slice(&po.payload);
        Ok(frame)
    }

    /// The PacketIn a frame sent to the CPU port becomes: its `packet_in` header as metadata.
    pub fn packet_in(&self, frame: Vec<u8>) -> p4::PacketIn {
        let fields = self.pipeline.as_ref().and_then(|p| p.schema.packet_in.as_ref());
        let Some(fields) = fields else {
            return p4::PacketIn { payload: frame, metadata: Vec::new() };
        };
        let widths: Vec<u32> = fields.iter().map(|f| f.1).collect();
        let bytes = widths.iter().sum::<u32>().div_ceil(8) as usize;
        match unpack(&frame, &widths) {
            Some(vals) => p4::PacketIn {
                payload: frame[bytes..].to_vec(),
                metadata: fields
                    .iter()
                    .zip(vals)
                    .map(|((id, _), v)| p4::PacketMetadata { metadata_id: *id, value: encode(v) })
                    .collect(),
            },
            None => p4::PacketIn { payload: frame, metadata: Vec::new() },
        }
    }

    /// Entries idle past their time to live (`idle_timeout_ns`) on every worker, each
    /// reported once per idle period, as the TableEntry keys an IdleTimeoutNotification
    /// carries (table, match, priority, `idle_timeout_ns`, metadata).
    pub fn idle_expired(&mut self) -> Vec<p4::TableEntry> {
        let Some(p) = &self.pipeline else { return Vec::new() };
        if !p.schema.tables.values().any(|t| t.idle) {
            return Vec::new();
        }
        let now = self.control.io().now_ns();
        let pending = &mut self.idle_pending;
        let extras = &self.obj.extras;
        self.control.with_all(|sws| {
            let workers = sws.len();
            for (w, s) in sws.iter_mut().enumerate() {
                for key in s.take_idle_expired(now) {
                    pending.entry(key).or_default().insert(w);
                }
            }
            let ready: Vec<(usize, Handle)> =
                pending.iter().filter(|(_, w)| w.len() >= workers).map(|(k, _)| *k).collect();
            let mut by_table: BTreeMap<usize, Vec<Handle>> = BTreeMap::new();
            for k in &ready {
                pending.remove(k);
                by_table.entry(k.0).or_default().push(k.1);
            }
            let mut out = Vec::new();
            let Some(sw) = sws.first() else { return out };
            for (t, hs) in by_table {
                let Some(ts) = p.schema.tables.values().find(|x| x.index == t) else { continue };
                let table_id = p.schema.table_ids.get(t).copied().unwrap_or(0);
                for e in sw.table_entries(t).into_iter().filter(|e| hs.contains(&e.handle)) {
                    let extra = extras.get(&(t, e.handle)).cloned().unwrap_or_default();
                    out.push(p4::TableEntry {
                        table_id,
                        r#match: to_proto_matches(ts, &e.matches),
                        priority: if ts.priority { e.priority.unwrap_or(0) as i32 } else { 0 },
                        controller_metadata: extra.controller_metadata,
                        idle_timeout_ns: e.ttl_ns.map_or(0, |t| t as i64),
                        metadata: extra.metadata,
                        ..Default::default()
                    });
                }
            }
            out
        })
    }

    /// The configuration of digest `id`, if the controller asked for it.
    pub fn digest_config(&self, id: u32) -> Option<p4::digest_entry::Config> {
        self.obj.digests.get(&id).copied()
    }

    /// A digest the program sent: (its P4Info id, its data), if the controller asked for
    /// this digest (a DigestEntry), with the digest's configuration.
    pub fn digest(
        &self,
        index: u32,
        vals: &[u128],
    ) -> Option<(u32, p4::P4Data, p4::digest_entry::Config)> {
        let p = self.pipeline.as_ref()?;
        let (id, widths) = p.schema.digests.get(index as usize)?;
        let cfg = self.obj.digests.get(id)?;
        let members = vals
            .iter()
            .zip(widths)
            .map(|(v, _)| p4::P4Data { data: Some(p4::p4_data::Data::Bitstring(encode(*v))) })
            .collect();
        Some((
            *id,
            p4::P4Data { data: Some(p4::p4_data::Data::Struct(p4::P4StructLike { members })) },
            *cfg,
        ))
    }
}

// ---------------------------------------------------------------- translation

fn inv(msg: impl Into<String>) -> Fail {
    Fail::new(Code::InvalidArgument, msg)
}

/// The switch's matches for a P4Runtime match list (wildcards for omitted fields).
fn matches(ts: &TableSchema, fm: &[p4::FieldMatch]) -> Result<Vec<Fm>, Fail> {
    use p4::field_match::FieldMatchType as T;
    let mut seen = BTreeSet::new();
    for m in fm {
        if !seen.insert(m.field_id) {
            return Err(inv(format!("field {} given twice", m.field_id)));
        }
        if !ts.fields.iter().any(|f| f.id == m.field_id) {
            return Err(inv(format!("table {} has no field id {}", ts.name, m.field_id)));
        }
    }
    let mut out = Vec::with_capacity(ts.fields.len());
    for f in &ts.fields {
        let w = f.width;
        let all = if w >= 128 { u128::MAX } else { (1u128 << w) - 1 };
        let what = format!("field {} of {}", f.id, ts.name);
        let given =
            fm.iter().find(|m| m.field_id == f.id).and_then(|m| m.field_match_type.as_ref());
        let v = match (f.kind, given) {
            (MatchKind::Exact, None) => {
                return Err(inv(format!("{what}: an exact field cannot be omitted")));
            }
            (MatchKind::Exact, Some(T::Exact(e))) => Fm::Exact(decode(&e.value, w, &what)?),
            (MatchKind::Ternary, None) => Fm::Ternary { value: 0, mask: 0 },
            (MatchKind::Ternary, Some(T::Ternary(t))) => {
                let value = decode(&t.value, w, &what)?;
                let mask = decode(&t.mask, w, &what)?;
                if mask == 0 {
                    return Err(inv(format!("{what}: a zero mask: omit the field instead")));
                }
                if value & !mask != 0 {
                    return Err(inv(format!("{what}: value has bits outside the mask")));
                }
                Fm::Ternary { value, mask }
            }
            (MatchKind::Lpm, None) => Fm::Lpm { value: 0, len: 0 },
            (MatchKind::Lpm, Some(T::Lpm(l))) => {
                let value = decode(&l.value, w, &what)?;
                let len =
                    u32::try_from(l.prefix_len).ok().filter(|l| *l <= w).ok_or_else(|| {
                        inv(format!("{what}: prefix length {} out of 1..={w}", l.prefix_len))
                    })?;
                if len == 0 {
                    return Err(inv(format!("{what}: prefix length 0: omit the field instead")));
                }
                let host = if len >= w { 0 } else { all >> len };
                if value & host != 0 {
                    return Err(inv(format!("{what}: value has bits past the prefix length")));
                }
                Fm::Lpm { value, len }
            }
            (MatchKind::Range, None) => Fm::Range { lo: 0, hi: all },
            (MatchKind::Range, Some(T::Range(r))) => {
                let lo = decode(&r.low, w, &what)?;
                let hi = decode(&r.high, w, &what)?;
                if lo > hi {
                    return Err(inv(format!("{what}: low > high")));
                }
                if lo == 0 && hi == all {
                    return Err(inv(format!("{what}: the full range: omit the field instead")));
                }
                Fm::Range { lo, hi }
            }
            (MatchKind::Optional, None) => Fm::Optional(None),
            (MatchKind::Optional, Some(T::Optional(o))) => {
                Fm::Optional(Some(decode(&o.value, w, &what)?))
            }
            (k, Some(_)) => return Err(inv(format!("{what}: not a {k} match"))),
        };
        out.push(v);
    }
    Ok(out)
}

/// P4Runtime matches for the switch's (wildcards omitted).
fn to_proto_matches(ts: &TableSchema, ms: &[Fm]) -> Vec<p4::FieldMatch> {
    use p4::field_match as f;
    let mut out = Vec::new();
    for (fs, m) in ts.fields.iter().zip(ms) {
        let all = if fs.width >= 128 { u128::MAX } else { (1u128 << fs.width) - 1 };
        let t = match *m {
            Fm::Exact(v) => Some(f::FieldMatchType::Exact(f::Exact { value: encode(v) })),
            Fm::Ternary { mask: 0, .. } | Fm::Lpm { len: 0, .. } | Fm::Optional(None) => None,
            Fm::Ternary { value, mask } => Some(f::FieldMatchType::Ternary(f::Ternary {
                value: encode(value),
                mask: encode(mask),
            })),
            Fm::Lpm { value, len } => Some(f::FieldMatchType::Lpm(f::Lpm {
                value: encode(value),
                prefix_len: len as i32,
            })),
            Fm::Range { lo: 0, hi } if hi == all => None,
            Fm::Range { lo, hi } => {
                Some(f::FieldMatchType::Range(f::Range { low: encode(lo), high: encode(hi) }))
            }
            Fm::Optional(Some(v)) => {
                Some(f::FieldMatchType::Optional(f::Optional { value: encode(v) }))
            }
        };
        if let Some(t) = t {
            out.push(p4::FieldMatch { field_id: fs.id, field_match_type: Some(t) });
        }
    }
    out
}

/// The switch's call for a P4Runtime action in table `ts` (`default`: as a default action).
fn call(
    schema: &Schema,
    ts: &TableSchema,
    a: &p4::Action,
    default: bool,
) -> Result<ActionCall, Fail> {
    use crate::proto::p4::config::v1::action_ref::Scope;
    let Some((pos, scope)) = ts.actions.get(&a.action_id) else {
        return Err(inv(format!("table {} has no action id {}", ts.name, a.action_id)));
    };
    // Section 9.1.2: an action outside its scope is PERMISSION_DENIED.
    if !default && *scope == Scope::DefaultOnly as i32 {
        return Err(Fail::new(
            Code::PermissionDenied,
            format!("action {} is @defaultonly in {}", a.action_id, ts.name),
        ));
    }
    if default && *scope == Scope::TableOnly as i32 {
        return Err(Fail::new(
            Code::PermissionDenied,
            format!("action {} is @tableonly in {}", a.action_id, ts.name),
        ));
    }
    let act = &schema.actions[&a.action_id];
    Ok(ActionCall { action: *pos, args: args(act, a)? })
}

fn args(act: &crate::schema::ActionSchema, a: &p4::Action) -> Result<Vec<u128>, Fail> {
    if a.params.len() != act.params.len() {
        return Err(inv(format!(
            "action {} takes {} parameters, {} given",
            a.action_id,
            act.params.len(),
            a.params.len()
        )));
    }
    let mut out = Vec::new();
    for (id, w) in &act.params {
        let mut it = a.params.iter().filter(|p| p.param_id == *id);
        let (Some(p), None) = (it.next(), it.next()) else {
            return Err(inv(format!("action {}: parameter {id} missing or repeated", a.action_id)));
        };
        out.push(decode(&p.value, *w, &format!("parameter {id} of action {}", a.action_id))?);
    }
    Ok(out)
}

fn to_proto_action(schema: &Schema, prog_action: u32, a: &[u128]) -> p4::Action {
    let id = schema.action_ids.get(&prog_action).copied().unwrap_or(0);
    let params = schema
        .actions
        .get(&id)
        .map(|s| {
            s.params
                .iter()
                .zip(a)
                .map(|((pid, _), v)| p4::action::Param { param_id: *pid, value: encode(*v) })
                .collect()
        })
        .unwrap_or_default();
    p4::Action { action_id: id, params }
}

fn priority(ts: &TableSchema, p: i32) -> Result<Option<i64>, Fail> {
    match (ts.priority, p) {
        (true, p) if p > 0 => Ok(Some(i64::from(p))),
        (true, _) => Err(inv(format!("table {} needs a priority > 0", ts.name))),
        (false, 0) => Ok(None),
        (false, _) => Err(inv(format!("table {} takes no priority", ts.name))),
    }
}

fn meter_rates(
    c: &p4::MeterConfig,
) -> Result<(snic_p4::algo::MeterRate, snic_p4::algo::MeterRate), Fail> {
    if c.cir < 0 || c.pir < 0 || c.cburst < 0 || c.pburst < 0 {
        return Err(inv("negative meter rate or burst"));
    }
    if c.eburst != 0 {
        // An excess burst belongs to RFC 2697's single-rate marker (cir == pir); snic's meters
        // are RFC 2698's two-rate ones.
        return Err(if c.cir == c.pir {
            Fail::new(Code::Unimplemented, "single-rate (RFC 2697) meters with an excess burst")
        } else {
            inv("eburst is for single-rate meters (cir == pir)")
        });
    }
    if c.cir > c.pir {
        return Err(inv("cir above pir"));
    }
    let r = |rate: i64, burst: i64| snic_p4::algo::MeterRate {
        per_us: rate as f64 / 1e6,
        burst: burst as u64,
    };
    Ok((r(c.cir, c.cburst), r(c.pir, c.pburst)))
}

fn meter_config(
    r: Option<(snic_p4::algo::MeterRate, snic_p4::algo::MeterRate)>,
) -> Option<p4::MeterConfig> {
    r.map(|(c, p)| p4::MeterConfig {
        cir: (c.per_us * 1e6).round() as i64,
        cburst: c.burst as i64,
        pir: (p.per_us * 1e6).round() as i64,
        pburst: p.burst as i64,
        eburst: 0,
    })
}

fn port_of(r: &p4::Replica) -> Result<u32, Fail> {
    match &r.port_kind {
        Some(p4::replica::PortKind::EgressPort(p)) => Ok(*p),
        Some(p4::replica::PortKind::Port(b)) => decode(b, 32, "replica port").map(|v| v as u32),
        None => Err(inv("a replica needs a port")),
    }
}

/// The spec (CounterEntry): INVALID_ARGUMENT for a negative index, OUT_OF_RANGE past the array.
fn index_of(i: &Option<p4::Index>, size: u64, what: &str) -> Result<Option<usize>, Fail> {
    match i {
        None => Ok(None),
        Some(i) if i.index >= 0 && (i.index as u64) < size => Ok(Some(i.index as usize)),
        Some(i) if i.index < 0 => Err(inv(format!("{what}: negative index {}", i.index))),
        Some(i) => {
            Err(Fail::new(Code::OutOfRange, format!("{what}: index {} out of 0..{size}", i.index)))
        }
    }
}

/// Apply a Write batch to `sws` with the batch's atomicity (see the module doc).
fn apply_batch(
    schema: &Schema,
    obj: &mut Objects,
    sws: &mut [&mut Switch],
    updates: &[p4::Update],
    atomic: p4::write_request::Atomicity,
) -> Vec<Result<(), Fail>> {
    use p4::write_request::Atomicity;
    if atomic == Atomicity::ContinueOnError {
        return updates.iter().map(|u| apply_update(schema, obj, sws, u)).collect::<Vec<_>>();
    }
    let saved_sw: Vec<Switch> = sws.iter().map(|s| (**s).clone()).collect();
    let saved_obj = obj.clone();
    let mut results = Vec::with_capacity(updates.len());
    let mut failed = false;
    for u in updates {
        if failed {
            results.push(Err(Fail::new(Code::Aborted, "not applied: an earlier update failed")));
            continue;
        }
        let r = apply_update(schema, obj, sws, u);
        failed = r.is_err();
        results.push(r);
    }
    if failed {
        for (s, old) in sws.iter_mut().zip(saved_sw) {
            **s = old;
        }
        *obj = saved_obj;
        for r in results.iter_mut() {
            if r.is_ok() {
                *r = Err(Fail::new(Code::Aborted, "rolled back: another update failed"));
            }
        }
    }
    results
}

/// Apply one update.
fn apply_update(
    schema: &Schema,
    obj: &mut Objects,
    sws: &mut [&mut Switch],
    u: &p4::Update,
) -> Result<(), Fail> {
    use p4::entity::Entity as E;
    use p4::update::Type;
    let ty = Type::try_from(u.r#type).map_err(|_| inv("unknown update type"))?;
    if ty == Type::Unspecified {
        return Err(inv("update type is unspecified"));
    }
    let Some(ent) = u.entity.as_ref().and_then(|e| e.entity.as_ref()) else {
        return Err(inv("an update needs an entity"));
    };
    match ent {
        E::TableEntry(te) => table_write(schema, obj, sws, ty, te),
        E::ActionProfileMember(m) => member_write(schema, obj, sws, ty, m),
        E::ActionProfileGroup(g) => group_write(schema, obj, sws, ty, g),
        E::CounterEntry(c) => {
            if ty != Type::Modify {
                return Err(inv("counters take MODIFY only"));
            }
            let is = schema.instance(c.counter_id, Prefix::Counter)?;
            let cells: Vec<usize> = match index_of(&c.index, is.size, "counter")? {
                Some(i) => vec![i],
                None => (0..is.size as usize).collect(),
            };
            // The spec: without `data` the value is not modified.
            let Some(d) = c.data else { return Ok(()) };
            let v = (d.packet_count.max(0) as u64, d.byte_count.max(0) as u64);
            for i in cells {
                let mut first = true;
                all(sws, |s| s.counter_write(is.index, i, share(&mut first, v)))?;
            }
            Ok(())
        }
        E::DirectCounterEntry(c) => {
            if ty != Type::Modify {
                return Err(inv("direct counters take MODIFY only"));
            }
            let te = c
                .table_entry
                .as_ref()
                .ok_or_else(|| inv("a direct counter entry needs its table entry"))?;
            let (ts, h) = find_entry(schema, sws, te)?;
            if ts.direct_counter.is_none() {
                return Err(inv(format!("table {} has no direct counter", ts.name)));
            }
            // The spec: without `data` the value is not modified.
            let Some(d) = c.data else { return Ok(()) };
            let v = (d.packet_count.max(0) as u64, d.byte_count.max(0) as u64);
            let mut first = true;
            all(sws, |s| s.direct_counter_write(ts.index, h, share(&mut first, v)))
        }
        E::MeterEntry(m) => {
            if ty != Type::Modify {
                return Err(inv("meters take MODIFY only"));
            }
            let is = schema.instance(m.meter_id, Prefix::Meter)?;
            let idx = index_of(&m.index, is.size, "meter")?;
            // No config: back to the default (every packet green), as the spec has it.
            let Some(c) = &m.config else {
                return all(sws, |s| s.meter_reset_rates(is.index, idx));
            };
            let (c, p) = meter_rates(c)?;
            all(sws, |s| s.meter_set_rates(is.index, idx, c, p))
        }
        E::DirectMeterEntry(m) => {
            if ty != Type::Modify {
                return Err(inv("direct meters take MODIFY only"));
            }
            let te = m
                .table_entry
                .as_ref()
                .ok_or_else(|| inv("a direct meter entry needs its table entry"))?;
            let (ts, h) = find_entry(schema, sws, te)?;
            if ts.direct_meter.is_none() {
                return Err(inv(format!("table {} has no direct meter", ts.name)));
            }
            let Some(c) = &m.config else {
                return all(sws, |s| s.direct_meter_reset_rates(ts.index, h));
            };
            let (c, p) = meter_rates(c)?;
            all(sws, |s| s.direct_meter_set_rates(ts.index, h, c, p))
        }
        E::RegisterEntry(r) => {
            if ty != Type::Modify {
                return Err(inv("registers take MODIFY only"));
            }
            let is = schema.instance(r.register_id, Prefix::Register)?;
            let v = match r.data.as_ref().and_then(|d| d.data.as_ref()) {
                Some(p4::p4_data::Data::Bitstring(b)) => decode(b, is.width, "register value")?,
                _ => return Err(inv("a register value must be a bitstring")),
            };
            let cells: Vec<usize> = match index_of(&r.index, is.size, "register")? {
                Some(i) => vec![i],
                None => (0..is.size as usize).collect(),
            };
            for i in cells {
                all(sws, |s| s.register_write(is.index, i, v))?;
            }
            Ok(())
        }
        E::PacketReplicationEngineEntry(pre) => pre_write(obj, sws, ty, pre),
        E::ValueSetEntry(v) => {
            if ty != Type::Modify {
                return Err(inv("value sets take MODIFY only"));
            }
            let Some((index, width, size)) = schema.value_sets.get(&v.value_set_id).copied() else {
                return Err(Fail::new(
                    Code::NotFound,
                    format!("no value set id {}", v.value_set_id),
                ));
            };
            if v.members.len() > size as usize {
                return Err(Fail::new(
                    Code::ResourceExhausted,
                    format!("value set holds {size} members"),
                ));
            }
            let mut vals = Vec::new();
            for m in &v.members {
                use p4::field_match::FieldMatchType as T;
                let [fm] = m.r#match.as_slice() else {
                    return Err(inv("a value set member is one field match"));
                };
                match &fm.field_match_type {
                    Some(T::Exact(e)) => {
                        vals.push((decode(&e.value, width, "value set member")?, u128::MAX))
                    }
                    Some(T::Ternary(t)) => vals.push((
                        decode(&t.value, width, "value set member")?,
                        decode(&t.mask, width, "value set mask")?,
                    )),
                    _ => return Err(inv("value set members are exact or ternary")),
                }
                if fm.field_id != 1 {
                    return Err(inv(format!(
                        "value set {} has no field {}",
                        v.value_set_id, fm.field_id
                    )));
                }
            }
            for (i, x) in vals.iter().enumerate() {
                if vals[..i].contains(x) {
                    return Err(Fail::new(Code::AlreadyExists, "a value set member given twice"));
                }
            }
            all(sws, |s| {
                s.value_set_clear(index)?;
                for (v, m) in &vals {
                    s.value_set_add(index, *v, *m)?;
                }
                Ok(())
            })?;
            obj.value_sets.insert(v.value_set_id, v.members.clone());
            Ok(())
        }
        E::DigestEntry(d) => {
            if !schema.digests.iter().any(|x| x.0 == d.digest_id) {
                return Err(Fail::new(Code::NotFound, format!("no digest id {}", d.digest_id)));
            }
            let exists = obj.digests.contains_key(&d.digest_id);
            match ty {
                Type::Insert if exists => {
                    Err(Fail::new(Code::AlreadyExists, "digest already configured"))
                }
                Type::Modify | Type::Delete if !exists => {
                    Err(Fail::new(Code::NotFound, "digest not configured"))
                }
                Type::Delete => {
                    obj.digests.remove(&d.digest_id);
                    Ok(())
                }
                _ => {
                    let c = d.config.ok_or_else(|| inv("a digest entry needs a config"))?;
                    if c.max_list_size < 0 || c.max_timeout_ns < 0 || c.ack_timeout_ns < 0 {
                        return Err(inv("negative digest config"));
                    }
                    obj.digests.insert(d.digest_id, c);
                    Ok(())
                }
            }
        }
        E::ExternEntry(_) => Err(Fail::new(Code::Unimplemented, "extern entries")),
    }
}

/// The table and handle of the entry `te` names (by match and priority).
fn find_entry<'a>(
    schema: &'a Schema,
    sws: &mut [&mut Switch],
    te: &p4::TableEntry,
) -> Result<(&'a TableSchema, Handle), Fail> {
    let ts = schema.table(te.table_id)?;
    let ms = matches(ts, &te.r#match)?;
    let pr = priority(ts, te.priority)?;
    let sw = sws.first().ok_or_else(|| Fail::new(Code::Internal, "no switch"))?;
    let h = sw
        .table_find(ts.index, &ms, pr)
        .ok_or_else(|| Fail::new(Code::NotFound, format!("no such entry in {}", ts.name)))?;
    Ok((ts, h))
}

fn indirect(
    obj: &Objects,
    ts: &TableSchema,
    a: &p4::TableAction,
) -> Result<Option<Indirect>, Fail> {
    use p4::table_action::Type as T;
    let prof = ts.profile.and_then(|p| obj.profiles.get(&p));
    match (&a.r#type, ts.profile) {
        (Some(T::Action(_)), None) | (None, _) => Ok(None),
        (Some(T::Action(_)), Some(_)) => {
            Err(inv(format!("table {} takes members or groups", ts.name)))
        }
        (Some(T::ActionProfileMemberId(m)), Some(_)) => prof
            .and_then(|p| p.members.get(m))
            .map(|x| Some(Indirect::Member(x.0)))
            .ok_or_else(|| Fail::new(Code::NotFound, format!("no member {m}"))),
        (Some(T::ActionProfileGroupId(g)), Some(_)) => prof
            .and_then(|p| p.groups.get(g))
            .map(|x| Some(Indirect::Group(x.0)))
            .ok_or_else(|| Fail::new(Code::NotFound, format!("no group {g}"))),
        (Some(T::ActionProfileActionSet(_)), _) => {
            Err(Fail::new(Code::Unimplemented, "one-shot action profile programming"))
        }
        (Some(_), None) => Err(inv(format!("table {} has no action profile", ts.name))),
    }
}

fn table_write(
    schema: &Schema,
    obj: &mut Objects,
    sws: &mut [&mut Switch],
    ty: p4::update::Type,
    te: &p4::TableEntry,
) -> Result<(), Fail> {
    use p4::update::Type;
    let ts = schema.table(te.table_id)?;
    if te.idle_timeout_ns < 0 {
        return Err(inv("negative idle_timeout_ns"));
    }
    if te.idle_timeout_ns > 0 && !ts.idle {
        return Err(inv(format!("table {} does not support idle timeout", ts.name)));
    }
    if te.time_since_last_hit.is_some() {
        return Err(inv("time_since_last_hit is read-only"));
    }
    if te.r#const {
        return Err(inv("`const` is read-only"));
    }
    if te.counter_data.is_some() && ts.direct_counter.is_none() {
        return Err(inv(format!("table {} has no direct counter", ts.name)));
    }
    if te.meter_config.is_some() && ts.direct_meter.is_none() {
        return Err(inv(format!("table {} has no direct meter", ts.name)));
    }
    if te.is_default_action {
        if ty != Type::Modify {
            return Err(inv("the default entry takes MODIFY only"));
        }
        if !te.r#match.is_empty() || te.priority != 0 {
            return Err(inv("the default entry has no match and no priority"));
        }
        if te.idle_timeout_ns != 0 {
            return Err(inv("the default entry has no idle timeout"));
        }
        if ts.default_const {
            return Err(Fail::new(
                Code::PermissionDenied,
                format!("the default action of {} is const", ts.name),
            ));
        }
        // The default entry keeps the controller's metadata like any entry.
        let extra =
            Extra { metadata: te.metadata.clone(), controller_metadata: te.controller_metadata };
        obj.extras.insert((ts.index, DEFAULT_ENTRY), extra);
        return match te.action.as_ref() {
            None => all(sws, |s| s.table_reset_default(ts.index)),
            Some(a) => match indirect(obj, ts, a)? {
                Some(ind) => all(sws, |s| s.table_indirect_set_default(ts.index, ind)),
                None => {
                    let Some(p4::table_action::Type::Action(act)) = &a.r#type else {
                        return Err(inv("the default entry needs an action"));
                    };
                    let c = call(schema, ts, act, true)?;
                    all(sws, |s| s.table_set_default(ts.index, c.clone()))
                }
            },
        };
    }
    if ts.is_const {
        return Err(Fail::new(
            Code::PermissionDenied,
            format!("table {} has const entries", ts.name),
        ));
    }
    let ms = matches(ts, &te.r#match)?;
    let pr = priority(ts, te.priority)?;
    let existing = sws.first().and_then(|s| s.table_find(ts.index, &ms, pr));
    let extra =
        Extra { metadata: te.metadata.clone(), controller_metadata: te.controller_metadata };
    let target = |obj: &Objects| -> Result<(Option<Indirect>, Option<ActionCall>), Fail> {
        let Some(a) = te.action.as_ref() else {
            // MODIFY may leave the action as it is (section 9.1.2); INSERT may not.
            return if ty == Type::Modify {
                Ok((None, None))
            } else {
                Err(inv("an entry needs an action"))
            };
        };
        match indirect(obj, ts, a)? {
            Some(i) => Ok((Some(i), None)),
            None => match &a.r#type {
                Some(p4::table_action::Type::Action(act)) => {
                    Ok((None, Some(call(schema, ts, act, false)?)))
                }
                _ => Err(inv("an entry needs an action")),
            },
        }
    };
    match ty {
        Type::Insert => {
            if existing.is_some() {
                return Err(Fail::new(Code::AlreadyExists, format!("the entry is in {}", ts.name)));
            }
            let (ind, c) = target(obj)?;
            let h = match (ind, c) {
                (Some(i), _) => all(sws, |s| s.table_indirect_add(ts.index, ms.clone(), pr, i))?,
                (None, Some(c)) => all(sws, |s| s.table_add(ts.index, ms.clone(), pr, c.clone()))?,
                (None, None) => return Err(inv("an entry needs an action")),
            };
            direct_resources(ts, sws, h, te)?;
            if te.idle_timeout_ns > 0 {
                let ttl = Some(te.idle_timeout_ns as u64);
                all(sws, |s| s.table_set_entry_ttl(ts.index, h, ttl))?;
            }
            obj.extras.insert((ts.index, h), extra);
            Ok(())
        }
        Type::Modify => {
            let h = existing.ok_or_else(|| {
                Fail::new(Code::NotFound, format!("no such entry in {}", ts.name))
            })?;
            let (ind, c) = target(obj)?;
            match (ind, c) {
                (Some(i), _) => all(sws, |s| s.table_indirect_modify(ts.index, h, i))?,
                (None, Some(c)) => all(sws, |s| s.table_modify(ts.index, h, c.clone()))?,
                // No action given: it stays as it is.
                (None, None) => {}
            }
            direct_resources(ts, sws, h, te)?;
            if ts.idle {
                let ttl = (te.idle_timeout_ns > 0).then_some(te.idle_timeout_ns as u64);
                all(sws, |s| s.table_set_entry_ttl(ts.index, h, ttl))?;
            }
            obj.extras.insert((ts.index, h), extra);
            Ok(())
        }
        Type::Delete => {
            let h = existing.ok_or_else(|| {
                Fail::new(Code::NotFound, format!("no such entry in {}", ts.name))
            })?;
            all(sws, |s| s.table_delete(ts.index, h))?;
            obj.extras.remove(&(ts.index, h));
            Ok(())
        }
        Type::Unspecified => Err(inv("update type is unspecified")),
    }
}

/// The entry's direct counter and meter on INSERT or MODIFY: an unset `counter_data` leaves the
/// counter as it is; an unset `meter_config` is the default meter (every packet green), so a
/// MODIFY without it resets the meter, as the spec's Direct Resources section has it.
fn direct_resources(
    ts: &TableSchema,
    sws: &mut [&mut Switch],
    h: Handle,
    te: &p4::TableEntry,
) -> Result<(), Fail> {
    if let Some(d) = te.counter_data {
        let v = (d.packet_count.max(0) as u64, d.byte_count.max(0) as u64);
        let mut first = true;
        all(sws, |s| s.direct_counter_write(ts.index, h, share(&mut first, v)))?;
    }
    match &te.meter_config {
        Some(c) => {
            let (c, p) = meter_rates(c)?;
            all(sws, |s| s.direct_meter_set_rates(ts.index, h, c, p))?;
        }
        None if ts.direct_meter.is_some() => {
            all(sws, |s| s.direct_meter_reset_rates(ts.index, h))?;
        }
        None => {}
    }
    Ok(())
}

fn member_write(
    schema: &Schema,
    obj: &mut Objects,
    sws: &mut [&mut Switch],
    ty: p4::update::Type,
    m: &p4::ActionProfileMember,
) -> Result<(), Fail> {
    use p4::update::Type;
    let is = schema.instance(m.action_profile_id, Prefix::ActionProfile)?;
    let prof = obj.profiles.entry(m.action_profile_id).or_default();
    let exists = prof.members.get(&m.member_id).map(|x| x.0);
    let resolve = || -> Result<(u32, Vec<u128>), Fail> {
        let a = m.action.as_ref().ok_or_else(|| inv("a member needs an action"))?;
        let act = schema
            .actions
            .get(&a.action_id)
            .ok_or_else(|| Fail::new(Code::NotFound, format!("no action id {}", a.action_id)))?;
        // Only an action of the tables the profile implements (section 9.2.1).
        let listed = schema.tables.values().any(|t| {
            t.profile == Some(m.action_profile_id) && t.actions.contains_key(&a.action_id)
        });
        if !listed {
            return Err(inv(format!(
                "action {} is not an action of the tables of profile {}",
                a.action_id, m.action_profile_id
            )));
        }
        Ok((act.index, args(act, a)?))
    };
    match ty {
        Type::Insert => {
            if exists.is_some() {
                return Err(Fail::new(Code::AlreadyExists, format!("member {}", m.member_id)));
            }
            let (a, v) = resolve()?;
            let id = all(sws, |s| s.act_prof_create_member(is.index, a, v.clone()))?;
            prof.members.insert(m.member_id, (id, m.action.clone().unwrap_or_default()));
            Ok(())
        }
        Type::Modify => {
            let old = exists
                .ok_or_else(|| Fail::new(Code::NotFound, format!("member {}", m.member_id)))?;
            let (a, v) = resolve()?;
            all(sws, |s| s.act_prof_modify_member(is.index, old, a, v.clone()))?;
            prof.members.insert(m.member_id, (old, m.action.clone().unwrap_or_default()));
            Ok(())
        }
        Type::Delete => {
            let old = exists
                .ok_or_else(|| Fail::new(Code::NotFound, format!("member {}", m.member_id)))?;
            if prof.groups.values().any(|g| g.1.iter().any(|x| x.member_id == m.member_id)) {
                return Err(Fail::new(
                    Code::FailedPrecondition,
                    format!("member {} is in a group", m.member_id),
                ));
            }
            if in_use(schema, sws, m.action_profile_id, Indirect::Member(old)) {
                return Err(Fail::new(
                    Code::FailedPrecondition,
                    format!("member {} is used by a table entry", m.member_id),
                ));
            }
            all(sws, |s| s.act_prof_delete_member(is.index, old))?;
            prof.members.remove(&m.member_id);
            Ok(())
        }
        Type::Unspecified => Err(inv("update type is unspecified")),
    }
}

/// Whether an entry or the default action of a table implemented by profile `profile_id`
/// names `ind` (the spec refuses to delete such a member or group: FAILED_PRECONDITION).
fn in_use(schema: &Schema, sws: &[&mut Switch], profile_id: u32, ind: Indirect) -> bool {
    let Some(sw) = sws.first() else { return false };
    schema.tables.values().filter(|t| t.profile == Some(profile_id)).any(|t| {
        sw.table_indirect_default(t.index) == Some(ind)
            || sw.table_entries(t.index).iter().any(|e| e.indirect == Some(ind))
    })
}

fn group_write(
    schema: &Schema,
    obj: &mut Objects,
    sws: &mut [&mut Switch],
    ty: p4::update::Type,
    g: &p4::ActionProfileGroup,
) -> Result<(), Fail> {
    use p4::update::Type;
    let is = schema.instance(g.action_profile_id, Prefix::ActionProfile)?;
    if is.unit != 1 {
        return Err(inv("groups need an action selector"));
    }
    let prof = obj.profiles.entry(g.action_profile_id).or_default();
    let exists = prof.groups.get(&g.group_id).map(|x| (x.0, x.1.clone(), x.2));
    if g.max_size < 0 || g.max_size as u64 > is.size {
        return Err(inv(format!("max_size {} out of 0..={}", g.max_size, is.size)));
    }
    let mut ids = Vec::new();
    for m in &g.members {
        if m.weight < 1 {
            return Err(inv(format!("member {} has weight {}", m.member_id, m.weight)));
        }
        if m.weight > 1 {
            return Err(Fail::new(Code::Unimplemented, "member weights above 1"));
        }
        let Some((id, _)) = prof.members.get(&m.member_id) else {
            return Err(Fail::new(Code::NotFound, format!("no member {}", m.member_id)));
        };
        if ids.contains(id) {
            return Err(inv(format!("member {} twice", m.member_id)));
        }
        ids.push(*id);
    }
    let max = match &exists {
        Some((_, _, max)) => *max,
        None => g.max_size,
    };
    if max > 0 && ids.len() > max as usize {
        return Err(Fail::new(
            Code::ResourceExhausted,
            format!("group holds at most {max} members"),
        ));
    }
    match ty {
        Type::Insert => {
            if exists.is_some() {
                return Err(Fail::new(Code::AlreadyExists, format!("group {}", g.group_id)));
            }
            let gid = all(sws, |s| s.act_prof_create_group(is.index))?;
            for m in &ids {
                all(sws, |s| s.act_prof_add_member_to_group(is.index, *m, gid))?;
            }
            prof.groups.insert(g.group_id, (gid, g.members.clone(), g.max_size));
            Ok(())
        }
        Type::Modify => {
            let (gid, old, max) =
                exists.ok_or_else(|| Fail::new(Code::NotFound, format!("group {}", g.group_id)))?;
            if g.max_size != 0 && g.max_size != max {
                return Err(inv("max_size cannot change"));
            }
            for m in &old {
                if let Some((id, _)) = prof.members.get(&m.member_id) {
                    all(sws, |s| s.act_prof_remove_member_from_group(is.index, *id, gid))?;
                }
            }
            for m in &ids {
                all(sws, |s| s.act_prof_add_member_to_group(is.index, *m, gid))?;
            }
            prof.groups.insert(g.group_id, (gid, g.members.clone(), max));
            Ok(())
        }
        Type::Delete => {
            let (gid, _, _) =
                exists.ok_or_else(|| Fail::new(Code::NotFound, format!("group {}", g.group_id)))?;
            if in_use(schema, sws, g.action_profile_id, Indirect::Group(gid)) {
                return Err(Fail::new(
                    Code::FailedPrecondition,
                    format!("group {} is used by a table entry", g.group_id),
                ));
            }
            all(sws, |s| s.act_prof_delete_group(is.index, gid))?;
            prof.groups.remove(&g.group_id);
            Ok(())
        }
        Type::Unspecified => Err(inv("update type is unspecified")),
    }
}

fn pre_write(
    obj: &mut Objects,
    sws: &mut [&mut Switch],
    ty: p4::update::Type,
    pre: &p4::PacketReplicationEngineEntry,
) -> Result<(), Fail> {
    use p4::packet_replication_engine_entry::Type as T;
    use p4::update::Type;
    match &pre.r#type {
        None => Err(inv("a PRE entry needs a multicast group or a clone session")),
        Some(T::MulticastGroupEntry(m)) => {
            let g =
                u16::try_from(m.multicast_group_id).ok().filter(|g| *g > 0).ok_or_else(|| {
                    Fail::new(
                        // 0 is not a group id (INVALID_ARGUMENT); snic's groups are 16 bits.
                        if m.multicast_group_id == 0 {
                            Code::InvalidArgument
                        } else {
                            Code::OutOfRange
                        },
                        format!("multicast group {} out of 1..65536", m.multicast_group_id),
                    )
                })?;
            let exists = obj.mcast.contains_key(&m.multicast_group_id);
            // Replicas by instance (the replication id): one node each.
            let mut by_rid: BTreeMap<u16, Vec<u32>> = BTreeMap::new();
            let mut seen = BTreeSet::new();
            for r in &m.replicas {
                let port = port_of(r)?;
                let rid = u16::try_from(r.instance)
                    .map_err(|_| Fail::new(Code::OutOfRange, "replica instance above 65535"))?;
                if !seen.insert((port, rid)) {
                    return Err(inv(format!("replica (port {port}, instance {rid}) twice")));
                }
                by_rid.entry(rid).or_default().push(port);
            }
            let destroy = |sws: &mut [&mut Switch], nodes: &[NodeHandle]| -> Result<(), Fail> {
                for n in nodes {
                    all(sws, |s| s.mc_node_dissociate(g, *n))?;
                    all(sws, |s| s.mc_node_destroy(*n))?;
                }
                Ok(())
            };
            let create = |sws: &mut [&mut Switch]| -> Result<Vec<NodeHandle>, Fail> {
                let mut nodes = Vec::new();
                for (rid, ports) in &by_rid {
                    let n = all(sws, |s| Ok(s.mc_node_create(*rid, ports.clone())))?;
                    all(sws, |s| s.mc_node_associate(g, n))?;
                    nodes.push(n);
                }
                Ok(nodes)
            };
            match ty {
                Type::Insert => {
                    if exists {
                        return Err(Fail::new(Code::AlreadyExists, format!("multicast group {g}")));
                    }
                    all(sws, |s| s.mc_group_create(g))?;
                    let nodes = create(sws)?;
                    obj.mcast.insert(m.multicast_group_id, (m.replicas.clone(), nodes));
                    Ok(())
                }
                Type::Modify => {
                    let Some((_, old)) = obj.mcast.get(&m.multicast_group_id).cloned() else {
                        return Err(Fail::new(Code::NotFound, format!("multicast group {g}")));
                    };
                    destroy(sws, &old)?;
                    let nodes = create(sws)?;
                    obj.mcast.insert(m.multicast_group_id, (m.replicas.clone(), nodes));
                    Ok(())
                }
                Type::Delete => {
                    let Some((_, old)) = obj.mcast.remove(&m.multicast_group_id) else {
                        return Err(Fail::new(Code::NotFound, format!("multicast group {g}")));
                    };
                    destroy(sws, &old)?;
                    all(sws, |s| s.mc_group_destroy(g))
                }
                Type::Unspecified => Err(inv("update type is unspecified")),
            }
        }
        Some(T::CloneSessionEntry(c)) => {
            let exists = obj.clones.contains_key(&c.session_id);
            if c.session_id == 0 {
                return Err(Fail::new(Code::InvalidArgument, "clone session 0 is reserved"));
            }
            match ty {
                Type::Insert | Type::Modify => {
                    if ty == Type::Insert && exists {
                        return Err(Fail::new(
                            Code::AlreadyExists,
                            format!("clone session {}", c.session_id),
                        ));
                    }
                    if ty == Type::Modify && !exists {
                        return Err(Fail::new(
                            Code::NotFound,
                            format!("clone session {}", c.session_id),
                        ));
                    }
                    let port = match c.replicas.as_slice() {
                        [r] => port_of(r)?,
                        _ => {
                            return Err(Fail::new(
                                Code::Unimplemented,
                                "clone sessions with other than one replica",
                            ));
                        }
                    };
                    if c.packet_length_bytes != 0 {
                        return Err(Fail::new(
                            Code::Unimplemented,
                            "clone truncation (packet_length_bytes)",
                        ));
                    }
                    all(sws, |s| {
                        s.mirroring_add(
                            c.session_id,
                            MirrorSession { port: Some(port), mgrp: None },
                        );
                        Ok(())
                    })?;
                    obj.clones.insert(c.session_id, c.clone());
                    Ok(())
                }
                Type::Delete => {
                    if !exists {
                        return Err(Fail::new(
                            Code::NotFound,
                            format!("clone session {}", c.session_id),
                        ));
                    }
                    all(sws, |s| s.mirroring_delete(c.session_id))?;
                    obj.clones.remove(&c.session_id);
                    Ok(())
                }
                Type::Unspecified => Err(inv("update type is unspecified")),
            }
        }
    }
}

// ---------------------------------------------------------------- reads

fn entity(e: p4::entity::Entity) -> p4::Entity {
    p4::Entity { entity: Some(e) }
}

/// Sum a counter over every worker's switch.
fn summed(
    sws: &[Switch],
    f: impl Fn(&Switch) -> Result<(u64, u64), RuntimeError>,
) -> Result<(u64, u64), Fail> {
    let mut t = (0u64, 0u64);
    for s in sws {
        let (p, b) = f(s).map_err(rt)?;
        t = (t.0 + p, t.1 + b);
    }
    Ok(t)
}

/// Answer one read query from `sws`, every worker's switch (copies): tables from the first,
/// counters summed over all.
fn read_one(
    p: &Pipeline,
    obj: &Objects,
    sws: &[Switch],
    e: &p4::Entity,
) -> Result<Vec<p4::Entity>, Fail> {
    use p4::entity::Entity as E;
    let schema = &p.schema;
    let sw = sws.first().ok_or_else(|| Fail::new(Code::Internal, "no switch"))?;
    let Some(ent) = &e.entity else { return Err(inv("a read needs an entity")) };
    let mut out = Vec::new();
    match ent {
        E::TableEntry(q) => {
            if q.table_id == 0 && (!q.r#match.is_empty() || q.priority != 0 || q.action.is_some()) {
                return Err(inv("a read of every table takes no other filter"));
            }
            let tables: Vec<&TableSchema> = if q.table_id == 0 {
                let mut v: Vec<_> = schema.tables.values().collect();
                v.sort_by_key(|t| t.index);
                v
            } else {
                vec![schema.table(q.table_id)?]
            };
            for ts in tables {
                read_table(schema, obj, sws, ts, q, &mut out)?;
            }
        }
        E::ActionProfileMember(q) => {
            let mut ids: Vec<u32> = obj.profiles.keys().copied().collect();
            ids.sort_unstable();
            for pid in ids {
                if q.action_profile_id != 0 && q.action_profile_id != pid {
                    continue;
                }
                for (mid, (_, a)) in &obj.profiles[&pid].members {
                    if q.member_id == 0 || q.member_id == *mid {
                        out.push(entity(E::ActionProfileMember(p4::ActionProfileMember {
                            action_profile_id: pid,
                            member_id: *mid,
                            action: Some(a.clone()),
                        })));
                    }
                }
            }
            if q.action_profile_id != 0 {
                schema.instance(q.action_profile_id, Prefix::ActionProfile)?;
            }
        }
        E::ActionProfileGroup(q) => {
            let mut ids: Vec<u32> = obj.profiles.keys().copied().collect();
            ids.sort_unstable();
            for pid in ids {
                if q.action_profile_id != 0 && q.action_profile_id != pid {
                    continue;
                }
                for (gid, (_, members, max)) in &obj.profiles[&pid].groups {
                    if q.group_id == 0 || q.group_id == *gid {
                        out.push(entity(E::ActionProfileGroup(p4::ActionProfileGroup {
                            action_profile_id: pid,
                            group_id: *gid,
                            members: members.clone(),
                            max_size: *max,
                        })));
                    }
                }
            }
        }
        E::CounterEntry(q) => {
            let ids = instances_of(schema, q.counter_id, Prefix::Counter)?;
            for id in ids {
                let is = schema.instances[&id];
                let cells: Vec<usize> = match index_of(&q.index, is.size, "counter")? {
                    Some(i) => vec![i],
                    None => (0..is.size as usize).collect(),
                };
                for i in cells {
                    let (pk, by) = summed(sws, |s| s.counter_read(is.index, i))?;
                    out.push(entity(E::CounterEntry(p4::CounterEntry {
                        counter_id: id,
                        index: Some(p4::Index { index: i as i64 }),
                        data: Some(p4::CounterData {
                            byte_count: by as i64,
                            packet_count: pk as i64,
                        }),
                    })));
                }
            }
        }
        E::DirectCounterEntry(q) => {
            let te = q.table_entry.clone().unwrap_or_default();
            let mut rows = Vec::new();
            let specific = te.table_id != 0 && !te.r#match.is_empty();
            let before = out.len();
            let tq = p4::TableEntry { counter_data: None, ..te };
            read_tables(schema, obj, sws, &tq, &mut rows)?;
            for r in rows {
                let Some(E::TableEntry(t)) = r.entity else { continue };
                let ts = schema.table(t.table_id)?;
                if ts.direct_counter.is_none() || t.is_default_action {
                    continue;
                }
                let ms = matches(ts, &t.r#match)?;
                let pr = priority(ts, t.priority)?;
                if let Some(h) = sw.table_find(ts.index, &ms, pr) {
                    let (pk, by) = summed(sws, |s| s.direct_counter_read(ts.index, h))?;
                    out.push(entity(E::DirectCounterEntry(p4::DirectCounterEntry {
                        table_entry: Some(p4::TableEntry { action: None, ..t }),
                        data: Some(p4::CounterData {
                            byte_count: by as i64,
                            packet_count: pk as i64,
                        }),
                    })));
                }
            }
            // The spec: reading the direct counter of an entry that does not exist: NOT_FOUND.
            if specific && out.len() == before {
                return Err(Fail::new(Code::NotFound, "no such table entry"));
            }
        }
        E::MeterEntry(q) => {
            let ids = instances_of(schema, q.meter_id, Prefix::Meter)?;
            for id in ids {
                let is = schema.instances[&id];
                let cells: Vec<usize> = match index_of(&q.index, is.size, "meter")? {
                    Some(i) => vec![i],
                    None => (0..is.size as usize).collect(),
                };
                for i in cells {
                    let r = sw.meter_get_rates(is.index, i).map_err(rt)?;
                    out.push(entity(E::MeterEntry(p4::MeterEntry {
                        meter_id: id,
                        index: Some(p4::Index { index: i as i64 }),
                        config: meter_config(r),
                        counter_data: None,
                    })));
                }
            }
        }
        E::DirectMeterEntry(q) => {
            let te = q.table_entry.clone().unwrap_or_default();
            let specific = te.table_id != 0 && !te.r#match.is_empty();
            let before = out.len();
            let mut rows = Vec::new();
            read_tables(schema, obj, sws, &te, &mut rows)?;
            for r in rows {
                let Some(E::TableEntry(t)) = r.entity else { continue };
                let ts = schema.table(t.table_id)?;
                if ts.direct_meter.is_none() || t.is_default_action {
                    continue;
                }
                let ms = matches(ts, &t.r#match)?;
                let pr = priority(ts, t.priority)?;
                if let Some(h) = sw.table_find(ts.index, &ms, pr) {
                    let r = sw.direct_meter_get_rates(ts.index, h).map_err(rt)?;
                    out.push(entity(E::DirectMeterEntry(p4::DirectMeterEntry {
                        table_entry: Some(p4::TableEntry { action: None, ..t }),
                        config: meter_config(r),
                        counter_data: None,
                    })));
                }
            }
            // The spec: reading the direct meter of an entry that does not exist: NOT_FOUND.
            if specific && out.len() == before {
                return Err(Fail::new(Code::NotFound, "no such table entry"));
            }
        }
        E::RegisterEntry(q) => {
            let ids = instances_of(schema, q.register_id, Prefix::Register)?;
            for id in ids {
                let is = schema.instances[&id];
                let cells: Vec<usize> = match index_of(&q.index, is.size, "register")? {
                    Some(i) => vec![i],
                    None => (0..is.size as usize).collect(),
                };
                for i in cells {
                    let v = sw.register_read(is.index, i).map_err(rt)?;
                    out.push(entity(E::RegisterEntry(p4::RegisterEntry {
                        register_id: id,
                        index: Some(p4::Index { index: i as i64 }),
                        data: Some(p4::P4Data {
                            data: Some(p4::p4_data::Data::Bitstring(encode(v))),
                        }),
                    })));
                }
            }
        }
        E::PacketReplicationEngineEntry(q) => {
            use p4::packet_replication_engine_entry::Type as T;
            match &q.r#type {
                Some(T::MulticastGroupEntry(m)) => {
                    for (g, (replicas, _)) in &obj.mcast {
                        if m.multicast_group_id == 0 || m.multicast_group_id == *g {
                            out.push(entity(E::PacketReplicationEngineEntry(
                                p4::PacketReplicationEngineEntry {
                                    r#type: Some(T::MulticastGroupEntry(p4::MulticastGroupEntry {
                                        multicast_group_id: *g,
                                        replicas: replicas.clone(),
                                    })),
                                },
                            )));
                        }
                    }
                }
                Some(T::CloneSessionEntry(c)) => {
                    for (s, e) in &obj.clones {
                        if c.session_id == 0 || c.session_id == *s {
                            out.push(entity(E::PacketReplicationEngineEntry(
                                p4::PacketReplicationEngineEntry {
                                    r#type: Some(T::CloneSessionEntry(e.clone())),
                                },
                            )));
                        }
                    }
                }
                None => return Err(inv("a PRE read needs a multicast group or a clone session")),
            }
        }
        E::ValueSetEntry(q) => {
            let mut ids: Vec<u32> = schema.value_sets.keys().copied().collect();
            ids.sort_unstable();
            if q.value_set_id != 0 && !schema.value_sets.contains_key(&q.value_set_id) {
                return Err(Fail::new(
                    Code::NotFound,
                    format!("no value set id {}", q.value_set_id),
                ));
            }
            for id in ids {
                if q.value_set_id == 0 || q.value_set_id == id {
                    out.push(entity(E::ValueSetEntry(p4::ValueSetEntry {
                        value_set_id: id,
                        members: obj.value_sets.get(&id).cloned().unwrap_or_default(),
                    })));
                }
            }
        }
        E::DigestEntry(q) => {
            for (id, c) in &obj.digests {
                if q.digest_id == 0 || q.digest_id == *id {
                    out.push(entity(E::DigestEntry(p4::DigestEntry {
                        digest_id: *id,
                        config: Some(*c),
                    })));
                }
            }
        }
        E::ExternEntry(_) => return Err(Fail::new(Code::Unimplemented, "extern entries")),
    }
    Ok(out)
}

fn instances_of(schema: &Schema, id: u32, p: Prefix) -> Result<Vec<u32>, Fail> {
    if id != 0 {
        schema.instance(id, p)?;
        return Ok(vec![id]);
    }
    let mut v: Vec<u32> =
        schema.instances.keys().copied().filter(|i| Prefix::of(*i) == Some(p)).collect();
    v.sort_unstable();
    Ok(v)
}

fn read_tables(
    schema: &Schema,
    obj: &Objects,
    sws: &[Switch],
    q: &p4::TableEntry,
    out: &mut Vec<p4::Entity>,
) -> Result<(), Fail> {
    if q.table_id == 0 {
        let mut v: Vec<_> = schema.tables.values().collect();
        v.sort_by_key(|t| t.index);
        for ts in v {
            read_table(schema, obj, sws, ts, q, out)?;
        }
        Ok(())
    } else {
        read_table(schema, obj, sws, schema.table(q.table_id)?, q, out)
    }
}

fn read_table(
    schema: &Schema,
    obj: &Objects,
    sws: &[Switch],
    ts: &TableSchema,
    q: &p4::TableEntry,
    out: &mut Vec<p4::Entity>,
) -> Result<(), Fail> {
    let sw = sws.first().ok_or_else(|| Fail::new(Code::Internal, "no switch"))?;
    use p4::entity::Entity as E;
    let reverse = |ind: Indirect| -> Option<p4::TableAction> {
        let prof = obj.profiles.get(&ts.profile?)?;
        use p4::table_action::Type as T;
        let t = match ind {
            Indirect::Member(m) => {
                T::ActionProfileMemberId(*prof.members.iter().find(|x| x.1.0 == m)?.0)
            }
            Indirect::Group(g) => {
                T::ActionProfileGroupId(*prof.groups.iter().find(|x| x.1.0 == g)?.0)
            }
        };
        Some(p4::TableAction { r#type: Some(t) })
    };
    let table_id = schema.table_ids.get(ts.index).copied().unwrap_or(0);
    if q.is_default_action {
        let action = match sw.table_indirect_default(ts.index) {
            Some(ind) => reverse(ind),
            None => sw.table_default(ts.index).map(|c| p4::TableAction {
                r#type: Some(p4::table_action::Type::Action(action_of(schema, sw, ts, &c))),
            }),
        };
        let extra = obj.extras.get(&(ts.index, DEFAULT_ENTRY)).cloned().unwrap_or_default();
        #[allow(deprecated)]
        out.push(entity(E::TableEntry(p4::TableEntry {
            table_id,
            action,
            is_default_action: true,
            metadata: extra.metadata,
            controller_metadata: extra.controller_metadata,
            r#const: ts.default_const,
            ..Default::default()
        })));
        return Ok(());
    }
    // Filters (section 9.1.6): the match, a priority other than 0, the action, the
    // metadata; a match with priority 0 matches any priority.
    let want_match = if q.r#match.is_empty() { None } else { Some(matches(ts, &q.r#match)?) };
    let want_prio = (q.priority != 0).then_some(i64::from(q.priority));
    let want_action = direct_action_id(q.action.as_ref());
    // Idle times on the other workers, when asked for.
    let idle_of: Option<Vec<HashMap<Handle, u64>>> = (q.time_since_last_hit.is_some() && ts.idle)
        .then(|| {
            sws[1..]
                .iter()
                .map(|s| {
                    s.table_entries(ts.index).into_iter().map(|x| (x.handle, x.idle_ns)).collect()
                })
                .collect()
        });
    for e in sw.table_entries(ts.index) {
        if want_match.as_ref().is_some_and(|m| &e.matches != m)
            || want_prio.is_some_and(|p| e.priority != Some(p))
        {
            continue;
        }
        let extra = obj.extras.get(&(ts.index, e.handle)).cloned().unwrap_or_default();
        if (!q.metadata.is_empty() && extra.metadata != q.metadata)
            || (q.controller_metadata != 0 && extra.controller_metadata != q.controller_metadata)
        {
            continue;
        }
        let action = match e.indirect {
            Some(ind) => reverse(ind),
            None => Some(p4::TableAction {
                r#type: Some(p4::table_action::Type::Action(action_of(schema, sw, ts, &e.call))),
            }),
        };
        if want_action.is_some_and(|id| direct_action_id(action.as_ref()) != Some(id)) {
            continue;
        }
        let counter_data = if q.counter_data.is_some() && ts.direct_counter.is_some() {
            // This worker's count plus the others' (the same handle in every worker).
            let others = summed(&sws[1..], |s| s.direct_counter_read(ts.index, e.handle))?;
            Some(p4::CounterData {
                byte_count: (e.counter.1 + others.1) as i64,
                packet_count: (e.counter.0 + others.0) as i64,
            })
        } else {
            None
        };
        let meter_config = if q.meter_config.is_some() && ts.direct_meter.is_some() {
            meter_config(sw.direct_meter_get_rates(ts.index, e.handle).ok().flatten())
        } else {
            None
        };
        #[allow(deprecated)]
        out.push(entity(E::TableEntry(p4::TableEntry {
            table_id,
            r#match: to_proto_matches(ts, &e.matches),
            action,
            priority: if ts.priority { e.priority.unwrap_or(0) as i32 } else { 0 },
            controller_metadata: extra.controller_metadata,
            meter_config,
            counter_data,
            is_default_action: false,
            idle_timeout_ns: e.ttl_ns.map_or(0, |t| t as i64),
            // The least idle time over the workers (each sees its own share of the packets).
            time_since_last_hit: idle_of.as_ref().map(|others| {
                let idle = others
                    .iter()
                    .filter_map(|m| m.get(&e.handle))
                    .fold(e.idle_ns, |a, b| a.min(*b));
                p4::table_entry::IdleTimeout { elapsed_ns: idle as i64 }
            }),
            metadata: extra.metadata,
            meter_counter_data: None,
            r#const: ts.is_const,
        })));
    }
    Ok(())
}

/// The action id of a table action naming an action directly (not a member or group).
fn direct_action_id(a: Option<&p4::TableAction>) -> Option<u32> {
    match a?.r#type.as_ref()? {
        p4::table_action::Type::Action(a) => Some(a.action_id),
        _ => None,
    }
}

/// The P4Runtime action of a switch call in table `ts`.
fn action_of(schema: &Schema, sw: &Switch, ts: &TableSchema, c: &ActionCall) -> p4::Action {
    let prog_action =
        sw.program().tables[ts.index].actions.get(c.action as usize).map_or(0, |a| a.action);
    to_proto_action(schema, prog_action, &c.args)
}
