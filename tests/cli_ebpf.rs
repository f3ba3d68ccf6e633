//! `snic ebpf` end to end against the built binary: `verify` of a good and a refused
//! program (text and JSON, exit codes), and the `xdp:` stage of a running `snic run` driven
//! over its control socket: hot swap (`load`), maps (`map dump|update|delete`) and ring-buffer
//! events. Programs are compiled with the machine's clang (skipped without it, outside CI).

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn snic() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_snic"));
    c.env_remove("RUST_LOG").env_remove("RUST_BACKTRACE");
    c
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Compile `c` and write the object to `dir/name.o`.
fn object(dir: &Path, name: &str, c: &str) -> PathBuf {
    let bytes = snic_ebpf::testing::compile_str(name, c, &[]);
    let path = dir.join(format!("{name}.o"));
    std::fs::write(&path, bytes).unwrap();
    path
}

const HEADER: &str = "#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\n";

/// Counts packets in `hits[KEY]` and passes them.
fn counter(key: u32) -> String {
    format!(
        "{HEADER}struct {{ __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, __u32); __type(value, __u64); __uint(max_entries, 4); }} hits SEC(\".maps\");
SEC(\"xdp\") int count(struct xdp_md *ctx) {{
  __u32 k = {key}; __u64 *v = bpf_map_lookup_elem(&hits, &k);
  if (v) __sync_fetch_and_add(v, 1);
  return XDP_PASS;
}}
char LICENSE[] SEC(\"license\") = \"GPL\";\n"
    )
}

/// Reads a byte 20 bytes into the packet without checking the length.
const UNCHECKED: &str = "SEC(\"xdp\") int oob(struct xdp_md *ctx) {
  unsigned char *d = (void *)(long)ctx->data;
  return d[20] == 1 ? XDP_DROP : XDP_PASS;
}
char LICENSE[] SEC(\"license\") = \"GPL\";\n";

#[test]
fn verify_prints_programs_and_maps_or_the_refusal_with_its_state() {
    if !snic_ebpf::testing::require_clang("verify_prints") {
        return;
    }
    let dir = common::temp_dir("cli-ebpf-verify");
    let good = object(&dir, "good", &counter(0));
    let out = common::run_ok(snic().args(["ebpf", "verify"]).arg(&good));
    let t = text(&out);
    assert!(t.contains("map hits array key 4 value 8 max_entries 4"), "{t}");
    assert!(t.contains("program xdp/count (xdp, "), "{t}");
    assert!(t.contains("verified in"), "{t}");

    let out = common::run_ok(snic().args(["ebpf", "verify", "--json"]).arg(&good));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["programs"][0]["maps"][0], "hits", "{v}");
    assert!(v["programs"][0]["insns"].as_u64().unwrap() > 3, "{v}");

    let bad = object(&dir, "bad", &format!("{HEADER}{UNCHECKED}"));
    let out = snic().args(["ebpf", "verify"]).arg(&bad).output().unwrap();
    assert!(!out.status.success(), "a refused program is a failure: {}", text(&out));
    let t = text(&out);
    assert!(t.contains("REFUSED at instruction 1:"), "{t}");
    assert!(t.contains("packet_size"), "the failing path's state is shown: {t}");
    assert!(t.contains("r1.type=packet"), "{t}");

    let out = snic().args(["ebpf", "verify", "--json"]).arg(&bad).output().unwrap();
    assert!(!out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["programs"][0]["ok"], false, "{v}");
    assert_eq!(v["programs"][0]["insn"], 1, "{v}");
    assert!(!v["programs"][0]["state"].as_array().unwrap().is_empty(), "{v}");

    // Not an object, a missing section: clear errors, non-zero exit.
    let junk = dir.join("junk.o");
    std::fs::write(&junk, b"not an ELF file").unwrap();
    let out = snic().args(["ebpf", "verify"]).arg(&junk).output().unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("not a loadable BPF object"), "{}", text(&out));
    let out = snic().args(["ebpf", "verify", "--section", "tc"]).arg(&good).output().unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("the object has: xdp/count"), "{}", text(&out));
}
