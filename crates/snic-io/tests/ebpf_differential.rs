//! The shipped XDP examples on thousands of packets (snic's frame builders and scapy's, seeded):
//! the Linux kernel's `BPF_PROG_TEST_RUN` verdicts, output bytes and final map contents equal
//! what each example's documented behaviour (a model written here in Rust) says, so the
//! examples do what their README claims and the kernel oracle is exercised end to end.
//!
//! Needs clang and root: skips with a message without them, fails under CI.

#[path = "ebpf/kit.rs"]
mod kit;

use kit::{Kernel, all_frames, example};
use snic_io::bpf;

const SEED: u64 = 16;
const FRAMES: usize = 2000;

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;

fn ready(test: &str) -> bool {
    snic_ebpf::testing::require_clang(test) && bpf::require_bpf(test)
}

fn be16(f: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([f[at], f[at + 1]])
}

/// Checks one program over every frame against `model(frame) -> (action, bytes out)`, then
/// returns how many frames the kernel ran.
fn check_frames(
    name: &str,
    k: &Kernel,
    frames: &[Vec<u8>],
    mut model: impl FnMut(&[u8]) -> (u32, Vec<u8>),
) -> usize {
    let mut ran = 0;
    for (i, f) in frames.iter().enumerate() {
        let Some(got) = k.run(f) else { continue };
        ran += 1;
        let want = model(f);
        assert_eq!(
            got,
            want,
            "{name}: frame {i} ({} bytes) {:02x?}: kernel (action, bytes) differs from the model",
            f.len(),
            f
        );
    }
    ran
}

/// The u64 values of an array map, in key order.
fn array_u64(k: &Kernel, map: &str) -> Vec<u64> {
    k.map(map)
        .entries()
        .unwrap()
        .into_iter()
        .map(|(_, v)| u64::from_ne_bytes(v[..8].try_into().unwrap()))
        .collect()
}

#[test]
fn proto_count_counts_what_it_says() {
    if !ready("proto_count_counts_what_it_says") {
        return;
    }
    let k = Kernel::load(&example("proto_count"));
    let frames = all_frames(SEED, FRAMES);
    let mut counts = vec![0u64; 257];
    let ran = check_frames("proto_count", &k, &frames, |f| {
        let (mut proto, mut l3) = (be16(f, 12), 14);
        if proto == 0x8100 {
            if f.len() < 18 {
                counts[256] += 1;
                return (XDP_PASS, f.to_vec());
            }
            proto = be16(f, 16);
            l3 = 18;
        }
        let key = match proto {
            0x0800 if f.len() >= l3 + 20 => f[l3 + 9] as usize,
            0x86dd if f.len() >= l3 + 40 => f[l3 + 6] as usize,
            _ => 256,
        };
        counts[key] += 1;
        (XDP_PASS, f.to_vec())
    });
    assert!(ran > FRAMES, "too few frames ran: {ran}");
    assert_eq!(array_u64(&k, "counts"), counts);
    assert!(counts[6] > 0 && counts[17] > 0 && counts[1] > 0 && counts[256] > 0, "{counts:?}");
}

#[test]
fn mac_swap_bounces_every_frame() {
    if !ready("mac_swap_bounces_every_frame") {
        return;
    }
    let k = Kernel::load(&example("mac_swap"));
    let frames = all_frames(SEED + 1, FRAMES);
    let ran = check_frames("mac_swap", &k, &frames, |f| {
        let mut out = f.to_vec();
        out[..6].copy_from_slice(&f[6..12]);
        out[6..12].copy_from_slice(&f[..6]);
        (XDP_TX, out)
    });
    assert!(ran > FRAMES);
}

#[test]
fn udp_firewall_drops_blocked_ports_and_sources() {
    if !ready("udp_firewall_drops_blocked_ports_and_sources") {
        return;
    }
    let k = Kernel::load(&example("udp_firewall"));
    let ports = [53u16, 11211, 19];
    for p in ports {
        k.map("blocked_ports").update(&p.to_ne_bytes(), &0u64.to_ne_bytes(), bpf::ANY).unwrap();
    }
    // 192.0.2.0/24 and 10.1.0.0/16: {prefix length (host order), address bytes}.
    let prefixes = [(24u32, [192u8, 0, 2, 0]), (16, [10, 1, 0, 0])];
    for (len, a) in prefixes {
        let mut key = len.to_ne_bytes().to_vec();
        key.extend_from_slice(&a);
        k.map("blocked_srcs").update(&key, &0u64.to_ne_bytes(), bpf::ANY).unwrap();
    }
    let blocked_src = |s: &[u8]| s[..3] == [192, 0, 2] || s[..2] == [10, 1];
    let frames = all_frames(SEED + 2, FRAMES);
    let mut stats = [0u64; 3];
    let ran = check_frames("udp_firewall", &k, &frames, |f| {
        let pass = (XDP_PASS, f.to_vec());
        if f.len() < 34 || be16(f, 12) != 0x0800 {
            stats[0] += 1;
            return pass;
        }
        if blocked_src(&f[26..30]) {
            stats[2] += 1;
            return (XDP_DROP, f.to_vec());
        }
        let udp = 14 + (f[14] & 0xf) as usize * 4;
        if f[23] != 17 || be16(f, 20) & 0x1fff != 0 || f.len() < udp + 8 {
            stats[0] += 1;
            return pass;
        }
        if ports.contains(&be16(f, udp + 2)) {
            stats[1] += 1;
            return (XDP_DROP, f.to_vec());
        }
        stats[0] += 1;
        pass
    });
    assert!(ran > FRAMES);
    assert_eq!(array_u64(&k, "stats"), stats.to_vec());
    assert!(stats[1] > 0 && stats[2] > 0, "no drops of one kind: {stats:?}");
    // The hit counts in the port map add up to the port drops.
    let port_hits: u64 = k
        .map("blocked_ports")
        .entries()
        .unwrap()
        .iter()
        .map(|(_, v)| u64::from_ne_bytes(v[..8].try_into().unwrap()))
        .sum();
    assert_eq!(port_hits, stats[1]);
}

#[test]
fn vxlan_decap_strips_the_outer_headers() {
    if !ready("vxlan_decap_strips_the_outer_headers") {
        return;
    }
    let k = Kernel::load(&example("vxlan_decap"));
    let frames = all_frames(SEED + 3, FRAMES);
    let mut stats = [0u64; 2];
    let ran = check_frames("vxlan_decap", &k, &frames, |f| {
        let vxlan = f.len() >= 64
            && be16(f, 12) == 0x0800
            && f[14] == 0x45
            && f[23] == 17
            && be16(f, 20) & 0x3fff == 0
            && be16(f, 36) == 4789
            && f[42] & 0x08 != 0;
        if vxlan {
            stats[0] += 1;
            (XDP_PASS, f[50..].to_vec())
        } else {
            stats[1] += 1;
            (XDP_PASS, f.to_vec())
        }
    });
    assert!(ran > FRAMES);
    assert_eq!(array_u64(&k, "stats"), stats.to_vec());
    assert!(stats[0] > 100, "too few VXLAN frames: {stats:?}");
}
