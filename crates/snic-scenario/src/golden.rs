//! Golden data: `snic scenario record` runs a scenario and writes what its `[golden]` table
//! lists into the golden directory (`STEM.golden` by default): each listed port's sent frames
//! as `PORT.pcap`, and `golden.json` with the buffers' SHA-256, the CQE lists and the counters.
//! `run` compares against it: one expectation per item, of kind `golden:pcap`,
//! `golden:memory`, `golden:cqes`, `golden:counter`.

use crate::report::ExpectReport;
use crate::world::World;
use crate::{Loaded, Report, RunOptions, ScenarioError};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The golden directory of `loaded` (`None`: the scenario has no `[golden]` table).
pub fn golden_dir(loaded: &Loaded) -> Option<PathBuf> {
    let g = loaded.scenario.golden.as_ref()?;
    let dir = match &g.dir {
        Some(d) => d.clone(),
        None => {
            let stem = loaded.path.file_stem().and_then(|s| s.to_str()).unwrap_or("scenario");
            format!("{stem}.golden")
        }
    };
    Some(loaded.dir.join(dir))
}

/// A port or host name as a file name.
fn file_of(port: &str) -> String {
    let safe: String = port
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' })
        .collect();
    format!("{safe}.pcap")
}

/// Whether `name` matches `pat` (`*` matches any run of characters).
pub fn wildcard(pat: &str, name: &str) -> bool {
    let parts: Vec<&str> = pat.split('*').collect();
    if parts.len() == 1 {
        return pat == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

/// A CQE as golden data (`status`, `opcode` in snake case, `byte_len`, `imm`, `wr_id`).
fn cqe_json(c: &snic_rdma::Cqe) -> Value {
    json!({
        "status": crate::hosts::util::snake(&format!("{:?}", c.status)),
        "opcode": crate::hosts::util::snake(&format!("{:?}", c.opcode)),
        "byte_len": c.byte_len,
        "imm": c.imm,
        "wr_id": c.wr_id,
    })
}

/// What the golden table lists, taken from a finished world.
/// Captures by port name.
type Captures = Vec<(String, Vec<Vec<u8>>)>;

fn collect(world: &World, loaded: &Loaded) -> Result<(Value, Captures), String> {
    let Some(g) = &loaded.scenario.golden else { return Ok((json!({}), Vec::new())) };
    let mut pcaps = Vec::new();
    for p in &g.pcaps {
        let sent = world.sent(p).ok_or_else(|| format!("golden pcap: no port or host {p:?}"))?;
        pcaps.push((p.clone(), sent.into_iter().map(|(_, f)| f).collect()));
    }
    let mut memory = BTreeMap::new();
    for m in &g.memory {
        let bytes =
            world.hosts.read(&world.tb, m).map_err(|e| format!("golden memory {m}: {e}"))?;
        memory.insert(m.clone(), hex(&sha256(&bytes)));
    }
    let mut cqes = BTreeMap::new();
    for cq in &g.cqes {
        let list = world.hosts.cqes(cq).ok_or_else(|| format!("golden cqes: no CQ {cq:?}"))?;
        cqes.insert(cq.clone(), list.iter().map(|(_, c)| cqe_json(c)).collect::<Vec<_>>());
    }
    let all = crate::world::counters(world);
    let mut counters = BTreeMap::new();
    for pat in &g.counters {
        let mut any = false;
        for (k, v) in all.iter().filter(|(k, _)| wildcard(pat, k)) {
            counters.insert(k.clone(), *v);
            any = true;
        }
        if !any {
            return Err(format!("golden counters: nothing matches {pat:?}"));
        }
    }
    Ok((json!({"memory": memory, "cqes": cqes, "counters": counters}), pcaps))
}

/// Run and record: the report (without golden comparisons) and the files written.
pub fn record(loaded: &Loaded, opts: &RunOptions) -> Result<(Report, Vec<PathBuf>), ScenarioError> {
    let dir = golden_dir(loaded).ok_or_else(|| {
        ScenarioError::Setup(format!(
            "{}: no [golden] table: nothing to record",
            loaded.scenario.name
        ))
    })?;
    let (report, world) = crate::timeline::run_world(loaded, opts, false)?;
    let (doc, pcaps) = collect(&world, loaded).map_err(ScenarioError::Run)?;
    std::fs::create_dir_all(&dir)
        .map_err(|e| ScenarioError::Run(format!("{}: {e}", dir.display())))?;
    let mut written = Vec::new();
    for (port, frames) in pcaps {
        let path = dir.join(file_of(&port));
        let timed: Vec<_> = frames.into_iter().map(|f| (snic_time::Instant::ZERO, f)).collect();
        crate::world::write_capture(&path, &timed).map_err(ScenarioError::Run)?;
        written.push(path);
    }
    let path = dir.join("golden.json");
    let text = serde_json::to_string_pretty(&doc).map_err(|e| ScenarioError::Run(e.to_string()))?;
    std::fs::write(&path, text + "\n")
        .map_err(|e| ScenarioError::Run(format!("{}: {e}", path.display())))?;
    written.push(path);
    Ok((report, written))
}

/// Compare the world with the recorded golden data (nothing when the scenario has none).
pub fn compare(world: &World, loaded: &Loaded) -> Vec<ExpectReport> {
    let (Some(g), Some(dir)) = (&loaded.scenario.golden, golden_dir(loaded)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let fail = |name: String, kind: &str, want: String, got: String| ExpectReport {
        name,
        kind: kind.into(),
        passed: false,
        want,
        got,
        diff: None,
    };
    let gpath = dir.join("golden.json");
    let doc: Value = match std::fs::read_to_string(&gpath) {
        Ok(t) => match serde_json::from_str(&t) {
            Ok(v) => v,
            Err(e) => {
                out.push(fail(
                    "golden".into(),
                    "golden",
                    gpath.display().to_string(),
                    e.to_string(),
                ));
                return out;
            }
        },
        Err(e) => {
            out.push(fail(
                "golden".into(),
                "golden",
                format!("{} (run `snic scenario record`)", gpath.display()),
                e.to_string(),
            ));
            return out;
        }
    };
    let (got, _) = match collect(world, loaded) {
        Ok(x) => x,
        Err(e) => {
            out.push(fail("golden".into(), "golden", "the golden items".into(), e));
            return out;
        }
    };
    for p in &g.pcaps {
        let name = format!("golden pcap {p}");
        let path = dir.join(file_of(p));
        match crate::world::read_capture(&path) {
            Ok(frames) => {
                let want: Vec<Vec<u8>> = frames.into_iter().map(|(_, f)| f).collect();
                out.push(crate::expect::check_pcap(
                    world,
                    name,
                    "golden:pcap",
                    p,
                    &want,
                    &g.mask,
                    false,
                ));
            }
            Err(e) => out.push(fail(name, "golden:pcap", path.display().to_string(), e)),
        }
    }
    for (section, kind) in
        [("memory", "golden:memory"), ("cqes", "golden:cqes"), ("counters", "golden:counter")]
    {
        let want = doc.get(section).and_then(Value::as_object).cloned().unwrap_or_default();
        let have = got.get(section).and_then(Value::as_object).cloned().unwrap_or_default();
        for (k, w) in &want {
            let h = have.get(k).cloned().unwrap_or(Value::Null);
            let mut r = ExpectReport {
                name: format!("golden {section} {k}"),
                kind: kind.into(),
                passed: &h == w,
                want: short(w),
                got: short(&h),
                diff: None,
            };
            if !r.passed
                && let (Some(a), Some(b)) = (w.as_array(), h.as_array())
            {
                let i = a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
                r.diff = Some(format!(
                    "first differing entry {i}: want {}, got {}",
                    a.get(i).map_or("none".into(), short),
                    b.get(i).map_or("none".into(), short)
                ));
            }
            out.push(r);
        }
        // A counter the engine gained since the recording (a new drop reason, say) that
        // stayed at zero changes nothing the golden data describes; anything else unrecorded
        // is a difference.
        let new_zero =
            |k: &String| section == "counters" && have.get(k).and_then(Value::as_u64) == Some(0);
        for k in have.keys().filter(|k| !want.contains_key(*k) && !new_zero(k)) {
            out.push(fail(
                format!("golden {section} {k}"),
                kind,
                "recorded".into(),
                "not in the golden data (record again)".into(),
            ));
        }
    }
    out
}

fn short(v: &Value) -> String {
    match v {
        Value::Array(a) => format!("{} entries", a.len()),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Lower-case hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// SHA-256 (FIPS 180-4), by the `sha2` crate.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(data).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_matches_the_standard_vectors() {
        assert_eq!(
            hex(&sha256(b"")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            hex(&sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let long = b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        assert_eq!(
            hex(&sha256(long)),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
    }

    #[test]
    fn wildcards_match_runs() {
        assert!(wildcard("nic0.drop.*", "nic0.drop.policy_deny"));
        assert!(wildcard("*.rx_packets", "nic0.port.wire.rx_packets"));
        assert!(wildcard("a*c*e", "abcde"));
        assert!(!wildcard("nic0.drop.*", "nic1.drop.x"));
        assert!(!wildcard("exact", "exactly"));
    }
}
