//! Maps made from a real clang-compiled object: every map type an object can declare.
//! (Global data from an object needs the loader to type `.data`/`.rodata`/`.bss` as arrays;
//! `tests/maps.rs` checks global-data maps from specs.)

use super::*;
use crate::testing::{compile_str, require_clang};

const SOURCE: &str = r#"
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct lpm_key { __u32 prefixlen; __u8 addr[4]; };

struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, __u32); __type(value, __u64);
         __uint(max_entries, 64); } flows SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, __u32); __type(value, __u64);
         __uint(max_entries, 8); } counts SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY); __type(key, __u32); __type(value, __u32);
         __uint(max_entries, 4); } percpu SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_LRU_HASH); __type(key, __u64); __type(value, __u32);
         __uint(max_entries, 16); } recent SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_LPM_TRIE); __type(key, struct lpm_key);
         __type(value, __u32); __uint(max_entries, 32);
         __uint(map_flags, BPF_F_NO_PREALLOC); } blocklist SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_DEVMAP); __type(key, __u32); __type(value, __u32);
         __uint(max_entries, 4); } ports SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 8192); } events SEC(".maps");

SEC("xdp")
int uses_all(struct xdp_md *ctx)
{
    __u32 k = 0, zeroed = 0;
    __u64 total = 0;
    __u64 k8 = 0;
    struct lpm_key lk = { 32, { 10, 0, 0, 1 } };
    __u64 *v = bpf_map_lookup_elem(&flows, &k);
    if (v) total += *v;
    v = bpf_map_lookup_elem(&counts, &k);
    if (v) total += *v;
    __u32 *w = bpf_map_lookup_elem(&percpu, &k);
    if (w) zeroed += *w;
    w = bpf_map_lookup_elem(&recent, &k8);
    if (w) zeroed += *w;
    w = bpf_map_lookup_elem(&blocklist, &lk);
    if (w) return XDP_DROP;
    bpf_ringbuf_output(&events, &k, sizeof(k), 0);
    if (total > zeroed) return XDP_PASS;
    return bpf_redirect_map(&ports, 0, 0);
}

char LICENSE[] SEC("license") = "GPL";
"#;

#[test]
fn an_objects_maps_are_created_with_their_initial_data() {
    if !require_clang("an_objects_maps_are_created_with_their_initial_data") {
        return;
    }
    let obj = Object::parse(&compile_str("maps_all_types", SOURCE, &[]), "maps_all_types.o")
        .expect("the object loads");
    let set = MapSet::new(&obj, 3).expect("every map is created");
    assert_eq!(set.len(), obj.maps.len());
    let kind = |name: &str| set.by_name(name).map(|m| m.kind());
    assert_eq!(kind("flows"), Some(MapKind::Hash));
    assert_eq!(kind("counts"), Some(MapKind::Array));
    assert_eq!(kind("percpu"), Some(MapKind::PerCpuArray));
    assert_eq!(kind("recent"), Some(MapKind::LruHash));
    assert_eq!(kind("blocklist"), Some(MapKind::LpmTrie));
    assert_eq!(kind("ports"), Some(MapKind::DevMap));
    assert_eq!(kind("events"), Some(MapKind::RingBuf));
    let bl = set.by_name("blocklist").unwrap();
    assert_eq!((bl.spec().key_size, bl.spec().value_size), (8, 4));
    assert_eq!(set.by_name("percpu").unwrap().get(&0u32.to_ne_bytes()).unwrap().len(), 3 * 8);

    // The same object again keeps every map.
    let again = MapSet::rebind(&obj, &set, 3).unwrap();
    assert!(again.report().iter().all(|(_, o)| *o == Origin::Kept), "{:?}", again.report());
    for (a, b) in again.iter().zip(set.iter()) {
        assert!(Arc::ptr_eq(a, b));
    }
}
