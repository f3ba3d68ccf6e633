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

fn snake(debug: &str) -> String {
    let mut s = String::new();
    for (i, c) in debug.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                s.push('_');
            }
            s.push(c.to_ascii_lowercase());
        } else {
            s.push(c);
        }
    }
    s
}

/// A CQE as golden data (`status`, `opcode` in snake case, `byte_len`, `imm`, `wr_id`).
fn cqe_json(c: &snic_rdma::Cqe) -> Value {
    json!({
        "status": snake(&format!("{:?}", c.status)),
        "opcode": snake(&format!("{:?}", c.opcode)),
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
        for k in have.keys().filter(|k| !want.contains_key(*k)) {
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

/// SHA-256 (FIPS 180-4).
pub fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut msg = data.to_vec();
    let bits = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bits.to_be_bytes());
    for block in msg.chunks(64) {
        let mut w = [0u32; 64];
        for (i, c) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16].wrapping_add(s0).wrapping_add(w[i - 7]).wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh.wrapping_add(s1).wrapping_add(ch).wrapping_add(K[i]).wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 32];
    for (i, x) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
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
