//! Memory and CQE expectations.

use super::{Hosts, util};
use crate::load::Loaded;
use crate::report::ExpectReport;
use crate::schema::{CqeSpec, ExpectSpec};
use snic_rdma::Cqe;
use snic_testbed::Testbed;

/// A CQE's status as the format names it (`success`, `loc_prot_err`, ...).
pub(super) fn status_name(c: &Cqe) -> String {
    util::snake(&format!("{:?}", c.status))
}

/// A CQE's opcode as the format names it (`rdma_write`, `recv`, ...).
pub(super) fn opcode_name(c: &Cqe) -> String {
    util::snake(&format!("{:?}", c.opcode))
}

pub(super) fn cqe_to_json(c: &Cqe) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    m.insert("wr_id".into(), c.wr_id.into());
    m.insert("status".into(), status_name(c).into());
    m.insert("opcode".into(), opcode_name(c).into());
    m.insert("byte_len".into(), c.byte_len.into());
    if let Some(i) = c.imm {
        m.insert("imm".into(), i.into());
    }
    serde_json::Value::Object(m)
}

fn cqe_text(c: &Cqe) -> String {
    let mut s = format!(
        "{{wr_id {}, status {}, opcode {}, byte_len {}",
        c.wr_id,
        status_name(c),
        opcode_name(c),
        c.byte_len
    );
    if let Some(i) = c.imm {
        s += &format!(", imm {i:#x}");
    }
    s + "}"
}

fn spec_text(w: &CqeSpec) -> String {
    let mut parts = Vec::new();
    if let Some(x) = w.wr_id {
        parts.push(format!("wr_id {x}"));
    }
    if let Some(x) = &w.status {
        parts.push(format!("status {x}"));
    }
    if let Some(x) = &w.opcode {
        parts.push(format!("opcode {x}"));
    }
    if let Some(x) = w.byte_len {
        parts.push(format!("byte_len {x}"));
    }
    if let Some(x) = w.imm {
        parts.push(format!("imm {x:#x}"));
    }
    format!("{{{}}}", parts.join(", "))
}

/// The fields of `c` that differ from what `w` wants.
fn mismatches(c: &Cqe, w: &CqeSpec) -> Vec<String> {
    let mut m = Vec::new();
    if let Some(x) = w.wr_id
        && x != c.wr_id
    {
        m.push(format!("wr_id {} (want {x})", c.wr_id));
    }
    if let Some(x) = &w.status
        && *x != status_name(c)
    {
        m.push(format!("status {} (want {x})", status_name(c)));
    }
    if let Some(x) = &w.opcode
        && *x != opcode_name(c)
    {
        m.push(format!("opcode {} (want {x})", opcode_name(c)));
    }
    if let Some(x) = w.byte_len
        && x != c.byte_len
    {
        m.push(format!("byte_len {} (want {x})", c.byte_len));
    }
    if let Some(x) = w.imm
        && Some(x) != c.imm
    {
        m.push(format!("imm {:?} (want {x:#x})", c.imm));
    }
    m
}

impl Hosts {
    pub(super) fn check_memory(
        &self,
        tb: &Testbed,
        loaded: &Loaded,
        spec: &ExpectSpec,
        buf: &str,
    ) -> ExpectReport {
        let name = spec.name.clone().unwrap_or_else(|| format!("memory {buf}"));
        let mut rep = ExpectReport { name, kind: "memory".into(), ..ExpectReport::default() };
        let got = match self.read_buf(tb, buf) {
            Ok(g) => g,
            Err(e) => {
                rep.want = "a readable buffer".into();
                rep.got = e;
                return rep;
            }
        };
        let summary =
            |v: &[u8]| format!("{} bytes, sha256 {}", v.len(), &util::sha256_hex(v)[..16]);
        if let Some(hash) = &spec.sha256 {
            let h = util::sha256_hex(&got);
            rep.want = format!("sha256 {}", hash.to_ascii_lowercase());
            rep.got = format!("{} bytes, sha256 {h}", got.len());
            rep.passed = h.eq_ignore_ascii_case(hash.trim());
            if !rep.passed {
                rep.diff = Some(format!("{buf}: {} bytes hash to {h}, not {hash}", got.len()));
            }
            return rep;
        }
        let (want, what) = if let Some(c) = &spec.content {
            match util::content_bytes(c, got.len(), &loaded.dir) {
                Ok(w) => (w, util::describe(c)),
                Err(e) => {
                    rep.want = util::describe(c);
                    rep.got = summary(&got);
                    rep.diff = Some(format!("{buf}: {e}"));
                    return rep;
                }
            }
        } else if let Some(other) = &spec.same_as {
            // Without a length, the other buffer is compared over this one's length.
            let explicit = matches!(
                crate::load::parse_buf(other, None),
                Ok(crate::load::Buf::Named(crate::load::BufRef { len: Some(_), .. }))
                    | Ok(crate::load::Buf::Raw { len: Some(_), .. })
            );
            let read = if explicit {
                self.read_buf(tb, other)
            } else {
                self.read_buf(tb, &format!("{other}:{}", got.len()))
                    .or_else(|_| self.read_buf(tb, other))
            };
            match read {
                Ok(w) => (w, format!("the bytes of {other}")),
                Err(e) => {
                    rep.want = format!("the bytes of {other}");
                    rep.got = summary(&got);
                    rep.diff = Some(e);
                    return rep;
                }
            }
        } else {
            rep.want = "content, same_as or sha256".into();
            rep.got = "none given".into();
            return rep;
        };
        rep.want = format!("{what} ({} bytes)", want.len());
        match util::byte_diff(&got, &want) {
            None => {
                rep.passed = true;
                rep.got = summary(&got);
            }
            Some(d) => {
                let at = util::first_difference(&got, &want).unwrap_or(0);
                rep.got = format!("{} bytes, differing from byte {at}", got.len());
                rep.diff = Some(format!("{buf}: {d}"));
            }
        }
        rep
    }

    pub(super) fn check_cqes(&self, spec: &ExpectSpec, cq: &str) -> ExpectReport {
        let name = spec.name.clone().unwrap_or_else(|| format!("cqes {cq}"));
        let mut rep = ExpectReport { name, kind: "cqes".into(), ..ExpectReport::default() };
        rep.want = format!("{} CQEs", spec.list.len());
        let Some(log) = self.cqes(cq) else {
            rep.got = format!("no CQ {cq}");
            return rep;
        };
        rep.got = format!("{} CQEs", log.len());
        let first_bad = spec.list.iter().zip(log).enumerate().find_map(|(i, (w, (t, c)))| {
            let m = mismatches(c, w);
            (!m.is_empty()).then(|| {
                format!(
                    "{cq}: CQE {i} (polled at {} ns) differs: {}\n  got  {}\n  want {}",
                    t.as_nanos(),
                    m.join(", "),
                    cqe_text(c),
                    spec_text(w)
                )
            })
        });
        let count = (spec.list.len() != log.len()).then(|| {
            let n = spec.list.len().min(log.len());
            let extra = if log.len() > n {
                format!("first extra: {}", cqe_text(&log[n].1))
            } else {
                format!("first missing: {}", spec_text(&spec.list[n]))
            };
            format!("{cq}: {} CQEs, want {}; {extra}", log.len(), spec.list.len())
        });
        rep.passed = first_bad.is_none() && count.is_none();
        if !rep.passed {
            rep.diff =
                Some([first_bad, count].into_iter().flatten().collect::<Vec<_>>().join("\n"));
        }
        rep
    }
}
