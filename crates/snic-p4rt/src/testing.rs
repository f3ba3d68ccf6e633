//! Test kit: a p4 stage with a P4Runtime server on a free loopback port, a blocking client, and
//! the stage run by hand on packets (feature `testing`).

use std::path::Path;
use std::time::Duration;

use snic_io::p4::P4Program;
use snic_pipeline::{Batch, Pipeline, PortId};
use snic_time::Instant;
use tokio::sync::mpsc;
use tonic::transport::Channel;

use crate::proto::p4::v1 as p4;
use crate::proto::p4::v1::p4_runtime_client::P4RuntimeClient;
use crate::server::{self, Handle, Options};

/// The test program (one of every object P4Runtime reaches), from `tests/p4/p4rt_test.p4`.
pub const TEST_PROGRAM: &str = include_str!("../tests/p4/p4rt_test.p4");

/// The CPU port of the kit's server.
pub const CPU_PORT: u32 = 255;

/// The device id of the kit's server.
pub const DEVICE: u64 = 1;

/// A pipeline config for program `src`: its P4Info (from snic's front end) and its text.
pub fn config(src: &str) -> p4::ForwardingPipelineConfig {
    let (built, _) = snic_io::p4::compile_source("test.p4", src.to_string(), &[], Vec::new())
        .unwrap_or_else(|e| panic!("test program: {e}"));
    let info = crate::p4info::for_program(&built.program, "test").expect("P4Info");
    p4::ForwardingPipelineConfig {
        p4info: Some(info),
        p4_device_config: src.as_bytes().to_vec(),
        cookie: Some(p4::forwarding_pipeline_config::Cookie { cookie: 42 }),
    }
}

/// An election id.
pub fn eid(e: u128) -> Option<p4::Uint128> {
    Some(p4::Uint128 { high: (e >> 64) as u64, low: e as u64 })
}

/// One StreamChannel.
#[derive(Debug)]
pub struct Stream {
    tx: mpsc::Sender<p4::StreamMessageRequest>,
    rx: tonic::Streaming<p4::StreamMessageResponse>,
}

/// What a stream received, or how it ended.
pub type Received = Result<Option<p4::StreamMessageResponse>, tonic::Status>;

/// The server, a client and the stage.
#[derive(Debug)]
pub struct Kit {
    /// The runtime the client runs on.
    pub rt: tokio::runtime::Runtime,
    /// The client.
    pub client: P4RuntimeClient<Channel>,
    /// The p4 stage's program.
    pub prog: P4Program,
    /// Each worker's pipeline (its p4 stage alone).
    pub pipelines: Vec<Pipeline>,
    server: Handle,
    now_s: u64,
}

impl Kit {
    /// A p4 stage without a program and a server for it.
    pub fn new() -> Kit {
        Kit::with_workers(1)
    }

    /// The same with `workers` switches (one stage each).
    pub fn with_workers(workers: usize) -> Kit {
        let prog = P4Program::load(Path::new(""), None, &[], workers).expect("empty program");
        let opts = Options {
            addr: "127.0.0.1:0".parse().expect("addr"),
            device_id: DEVICE,
            cpu_port: CPU_PORT,
            include: Vec::new(),
            program: None,
        };
        let server = server::spawn(prog.control(), opts).expect("server");
        // A thread of its own, so the connection moves on between calls (a packet-out sent, then
        // the stage run by hand).
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("rt");
        let url = format!("http://{}", server.addr());
        let client = rt.block_on(async {
            for _ in 0..100 {
                if let Ok(c) = P4RuntimeClient::connect(url.clone()).await {
                    return c;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            panic!("cannot connect to {url}");
        });
        let pipelines = (0..workers)
            .map(|w| {
                let mut p = Pipeline::new();
                p.push(Box::new(prog.stage(w).expect("stage")));
                p
            })
            .collect();
        Kit { rt, client, prog, pipelines, server, now_s: 1 }
    }

    /// Open a stream and send an arbitration update with election id `e` (default role).
    pub fn stream(&mut self, e: u128) -> Stream {
        self.stream_role(e, "")
    }

    /// Open a stream and arbitrate for `role`.
    pub fn stream_role(&mut self, e: u128, role: &str) -> Stream {
        let s = self.open();
        self.arbitrate(&s, DEVICE, e, role);
        s
    }

    /// Open a stream without sending anything on it.
    pub fn open(&mut self) -> Stream {
        let (tx, rx) = mpsc::channel(64);
        let mut client = self.client.clone();
        let rx = self.rt.block_on(async move {
            client
                .stream_channel(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await
                .expect("stream")
                .into_inner()
        });
        Stream { tx, rx }
    }

    /// Send an arbitration update on `s`.
    pub fn arbitrate(&self, s: &Stream, device: u64, e: u128, role: &str) {
        let upd = p4::MasterArbitrationUpdate {
            device_id: device,
            role: (!role.is_empty()).then(|| p4::Role { name: role.into(), ..Default::default() }),
            election_id: eid(e),
            status: None,
        };
        self.send(s, p4::stream_message_request::Update::Arbitration(upd));
    }

    /// Send a message on `s`.
    pub fn send(&self, s: &Stream, u: p4::stream_message_request::Update) {
        let tx = s.tx.clone();
        self.rt
            .block_on(async move { tx.send(p4::StreamMessageRequest { update: Some(u) }).await })
            .expect("send");
    }

    /// The next message on `s` within a second (`Ok(None)`: none came, or the stream ended).
    pub fn recv(&self, s: &mut Stream) -> Received {
        self.rt.block_on(async {
            match tokio::time::timeout(Duration::from_secs(1), s.rx.message()).await {
                Ok(r) => r,
                Err(_) => Ok(None),
            }
        })
    }

    /// The status code of the next arbitration update on `s`.
    pub fn arbitration_code(&self, s: &mut Stream) -> Option<i32> {
        match self.recv(s) {
            Ok(Some(p4::StreamMessageResponse {
                update: Some(p4::stream_message_response::Update::Arbitration(a)),
            })) => a.status.map(|s| s.code),
            _ => None,
        }
    }

    /// Become primary with election id `e` and push `src` (VERIFY_AND_COMMIT).
    pub fn primary_with(&mut self, e: u128, src: &str) -> Stream {
        let mut s = self.stream(e);
        assert_eq!(self.arbitration_code(&mut s), Some(0), "not primary");
        self.set_pipeline(e, 3, Some(config(src))).expect("set pipeline");
        s
    }

    /// SetForwardingPipelineConfig with `action` (the enum's number).
    pub fn set_pipeline(
        &mut self,
        e: u128,
        action: i32,
        config: Option<p4::ForwardingPipelineConfig>,
    ) -> Result<(), tonic::Status> {
        let req = p4::SetForwardingPipelineConfigRequest {
            device_id: DEVICE,
            election_id: eid(e),
            action,
            config,
            ..Default::default()
        };
        let mut c = self.client.clone();
        self.rt.block_on(async move { c.set_forwarding_pipeline_config(req).await }).map(|_| ())
    }

    /// GetForwardingPipelineConfig with a response type (the enum's number).
    pub fn get_pipeline(&mut self, ty: i32) -> Result<p4::ForwardingPipelineConfig, tonic::Status> {
        let req = p4::GetForwardingPipelineConfigRequest { device_id: DEVICE, response_type: ty };
        let mut c = self.client.clone();
        self.rt
            .block_on(async move { c.get_forwarding_pipeline_config(req).await })
            .map(|r| r.into_inner().config.unwrap_or_default())
    }

    /// Write `updates` as election id `e` with `atomicity` (the enum's number).
    pub fn write(
        &mut self,
        e: u128,
        atomicity: i32,
        updates: Vec<p4::Update>,
    ) -> Result<(), tonic::Status> {
        let req = p4::WriteRequest {
            device_id: DEVICE,
            election_id: eid(e),
            updates,
            atomicity,
            ..Default::default()
        };
        let mut c = self.client.clone();
        self.rt.block_on(async move { c.write(req).await }).map(|_| ())
    }

    /// Read `entities`.
    pub fn read(&mut self, entities: Vec<p4::Entity>) -> Result<Vec<p4::Entity>, tonic::Status> {
        let req = p4::ReadRequest { device_id: DEVICE, entities, ..Default::default() };
        let mut c = self.client.clone();
        self.rt.block_on(async move {
            let mut s = c.read(req).await?.into_inner();
            let mut out = Vec::new();
            while let Some(r) = s.message().await? {
                out.extend(r.entities);
            }
            Ok(out)
        })
    }

    /// Run frames `(port, bytes)` through the stage (and whatever packet-outs wait): the
    /// frames that left, with their port.
    pub fn run(&mut self, frames: &[(u16, Vec<u8>)]) -> Vec<(u16, Vec<u8>)> {
        self.run_on(0, frames)
    }

    /// The same on worker `w`'s stage.
    pub fn run_on(&mut self, w: usize, frames: &[(u16, Vec<u8>)]) -> Vec<(u16, Vec<u8>)> {
        let mut b = Batch::new(64);
        for (port, f) in frames {
            let slot = b.push_frame(f).expect("batch room");
            slot.meta.ingress = PortId(*port);
        }
        self.now_s += 1;
        self.pipelines[w].process(Instant::from_secs(self.now_s), &mut b);
        b.iter().filter_map(|x| Some((x.meta.egress?.0, x.data().to_vec()))).collect()
    }

    /// The server's address.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.server.addr()
    }
}

impl Default for Kit {
    fn default() -> Self {
        Kit::new()
    }
}

/// The per-update errors in a failed Write's status details.
pub fn write_errors(st: &tonic::Status) -> Vec<p4::Error> {
    use prost::Message;
    let Ok(s) = crate::proto::google::rpc::Status::decode(st.details()) else { return Vec::new() };
    s.details.iter().filter_map(|a| p4::Error::decode(a.value.as_slice()).ok()).collect()
}

/// An update of `ty` (1 insert, 2 modify, 3 delete) for entity `e`.
pub fn update(ty: i32, e: p4::entity::Entity) -> p4::Update {
    p4::Update { r#type: ty, entity: Some(p4::Entity { entity: Some(e) }) }
}

/// An exact field match.
pub fn exact(id: u32, v: &[u8]) -> p4::FieldMatch {
    p4::FieldMatch {
        field_id: id,
        field_match_type: Some(p4::field_match::FieldMatchType::Exact(p4::field_match::Exact {
            value: v.to_vec(),
        })),
    }
}

/// An action with parameters `(id, value)`.
pub fn action(id: u32, params: &[(u32, &[u8])]) -> Option<p4::TableAction> {
    Some(p4::TableAction {
        r#type: Some(p4::table_action::Type::Action(p4::Action {
            action_id: id,
            params: params
                .iter()
                .map(|(i, v)| p4::action::Param { param_id: *i, value: v.to_vec() })
                .collect(),
        })),
    })
}

/// An Ethernet frame: destination, source, EtherType, 46 bytes of payload.
pub fn eth(dst: [u8; 6], src: [u8; 6], etype: u16) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&etype.to_be_bytes());
    f.extend_from_slice(&[0xab; 46]);
    f
}

/// Every object's id in a P4Info, by name.
pub fn ids(info: &crate::proto::p4::config::v1::P4Info) -> std::collections::HashMap<String, u32> {
    let mut m = std::collections::HashMap::new();
    let mut add = |p: &Option<crate::proto::p4::config::v1::Preamble>| {
        if let Some(p) = p {
            m.insert(p.name.clone(), p.id);
        }
    };
    info.tables.iter().for_each(|x| add(&x.preamble));
    info.actions.iter().for_each(|x| add(&x.preamble));
    info.action_profiles.iter().for_each(|x| add(&x.preamble));
    info.counters.iter().for_each(|x| add(&x.preamble));
    info.direct_counters.iter().for_each(|x| add(&x.preamble));
    info.meters.iter().for_each(|x| add(&x.preamble));
    info.registers.iter().for_each(|x| add(&x.preamble));
    info.digests.iter().for_each(|x| add(&x.preamble));
    info.value_sets.iter().for_each(|x| add(&x.preamble));
    info.controller_packet_metadata.iter().for_each(|x| add(&x.preamble));
    m
}

/// Update types (`p4.v1.Update.Type`).
pub const INSERT: i32 = 1;
/// MODIFY.
pub const MODIFY: i32 = 2;
/// DELETE.
pub const DELETE: i32 = 3;

/// MAC address 00:00:00:00:00:01.
pub const MAC1: [u8; 6] = [0, 0, 0, 0, 0, 1];
/// MAC address 00:00:00:00:00:02.
pub const MAC2: [u8; 6] = [0, 0, 0, 0, 0, 2];

/// The test program's ids by name.
pub fn names() -> std::collections::HashMap<String, u32> {
    ids(config(TEST_PROGRAM).p4info.as_ref().expect("p4info"))
}

/// A kit with the test program pushed by a primary with election id 10, its stream, and the
/// program's ids.
pub fn ready() -> (Kit, Stream, std::collections::HashMap<String, u32>) {
    let mut k = Kit::new();
    let s = k.primary_with(10, TEST_PROGRAM);
    (k, s, names())
}

/// An entry of the test program's `I.fwd`: destination `mac` to `port`.
pub fn fwd_entry(
    n: &std::collections::HashMap<String, u32>,
    mac: [u8; 6],
    port: u8,
) -> p4::TableEntry {
    p4::TableEntry {
        table_id: n["I.fwd"],
        r#match: vec![exact(1, &mac)],
        action: action(n["I.forward"], &[(1, &[port])]),
        ..Default::default()
    }
}

/// Read the table entries query `q` selects.
pub fn table_entries(k: &mut Kit, q: p4::TableEntry) -> Result<Vec<p4::TableEntry>, tonic::Status> {
    use p4::entity::Entity as E;
    Ok(k.read(vec![p4::Entity { entity: Some(E::TableEntry(q)) }])?
        .into_iter()
        .filter_map(|e| match e.entity {
            Some(E::TableEntry(t)) => Some(t),
            _ => None,
        })
        .collect())
}
