//! The shipped XDP examples on thousands of packets (snic's frame builders and scapy's, seeded):
//! the Linux kernel's `BPF_PROG_TEST_RUN` verdicts, output bytes and final map contents equal
//! what each example's documented behaviour (a model written here in Rust) says, so the
//! examples do what their README claims and the kernel oracle is exercised end to end.
//!
//! Then the differential test proper: every good corpus program and every example, run by
//! snic's interpreter, by snic's JIT and by the kernel on the same frames from the same starting maps, gives
//! the same action, the same bytes out (metadata included) and, after all frames, the same map
//! contents, ring-buffer records included (in order). What cannot be compared is left out and
//! said so: LRU hashes past their capacity (the
//! kernel's eviction order depends on its per-CPU free lists; below capacity they are compared,
//! `lru_hash_matches_the_kernel_below_capacity`), and per-CPU values, compared
//! summed over CPUs (the kernel runs each test on whichever CPU the caller is on).
//!
//! Needs clang and root: skips with a message without them, fails under CI.

#[path = "ebpf/kit.rs"]
mod kit;

use kit::{Kernel, Snic, all_frames, corpus, example};
use snic_ebpf::{Engine, MapKind, Object};
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

/// Sets `key` to `value` in both the kernel's map and snic's.
fn set_both(k: &Kernel, s: &Snic, map: &str, key: &[u8], value: &[u8]) {
    k.map(map).update(key, value, bpf::ANY).unwrap_or_else(|e| panic!("kernel {map}: {e}"));
    s.map(map).set(key, value, 0).unwrap_or_else(|e| panic!("snic {map}: {e}"));
}

/// Starting map contents some programs need to take their interesting paths.
fn seed_maps(name: &str, k: &Kernel, s: &Snic) {
    let lpm = |len: u32, a: [u8; 4]| {
        let mut key = len.to_ne_bytes().to_vec();
        key.extend_from_slice(&a);
        key
    };
    match name {
        "udp_firewall" => {
            for p in [53u16, 11211, 19] {
                set_both(k, s, "blocked_ports", &p.to_ne_bytes(), &0u64.to_ne_bytes());
            }
            set_both(k, s, "blocked_srcs", &lpm(24, [192, 0, 2, 0]), &0u64.to_ne_bytes());
            set_both(k, s, "blocked_srcs", &lpm(16, [10, 1, 0, 0]), &0u64.to_ne_bytes());
        }
        "good_devmap_redirect" => {
            // Port 1 -> interface 1 (loopback; a test run only records the target).
            set_both(k, s, "ports", &1u32.to_ne_bytes(), &1u32.to_ne_bytes());
        }
        "good_lpm_trie" => {
            set_both(k, s, "blocked", &lpm(24, [192, 0, 2, 0]), &0u32.to_ne_bytes());
            set_both(k, s, "blocked", &lpm(8, [8, 0, 0, 0]), &7u32.to_ne_bytes());
        }
        _ => {}
    }
}

/// Sums a per-CPU value (`cpus` copies, each `stride` bytes) as u64 words.
fn fold_per_cpu(v: &[u8], stride: usize) -> Vec<u64> {
    let mut sum = vec![0u64; stride / 8];
    for chunk in v.chunks(stride) {
        for (i, w) in chunk.chunks_exact(8).enumerate() {
            sum[i] = sum[i].wrapping_add(u64::from_ne_bytes(w.try_into().unwrap()));
        }
    }
    sum
}

/// The comparable contents of every map: `(map name, sorted entries)`; per-CPU values summed.
type Contents = Vec<(String, Vec<(Vec<u8>, Vec<u8>)>)>;

fn map_contents(obj: &Object, k: &Kernel, s: &Snic, lru: bool) -> (Contents, Contents) {
    let (mut kc, mut sc) = (Vec::new(), Vec::new());
    for (i, spec) in obj.maps.iter().enumerate() {
        // LRU hashes are compared only when asked (module docs).
        if spec.kind == MapKind::LruHash && !lru {
            continue;
        }
        if spec.kind == MapKind::RingBuf {
            // Records in order, numbered (the order matters, not only the set).
            let numbered = |v: Vec<Vec<u8>>| -> Vec<(Vec<u8>, Vec<u8>)> {
                v.into_iter()
                    .enumerate()
                    .map(|(i, r)| ((i as u32).to_ne_bytes().to_vec(), r))
                    .collect()
            };
            kc.push((spec.name.clone(), numbered(k.maps[i].ringbuf_drain().unwrap())));
            sc.push((
                spec.name.clone(),
                numbered(s.prog.maps().get(i).unwrap().ringbuf_drain(usize::MAX)),
            ));
            continue;
        }
        let per_cpu = matches!(spec.kind, MapKind::PerCpuArray | MapKind::PerCpuHash);
        let stride = (spec.value_size as usize).next_multiple_of(8);
        let norm = |mut e: Vec<(Vec<u8>, Vec<u8>)>| {
            if per_cpu {
                for (_, v) in &mut e {
                    *v = fold_per_cpu(v, stride).iter().flat_map(|w| w.to_ne_bytes()).collect();
                }
            }
            e.sort();
            e
        };
        kc.push((spec.name.clone(), norm(k.maps[i].entries().unwrap())));
        sc.push((spec.name.clone(), norm(s.prog.maps().get(i).unwrap().entries())));
    }
    (kc, sc)
}

/// Runs one object in both, frame by frame; returns the first difference, if any.
fn differential(
    name: &str,
    obj: &Object,
    frames: &[Vec<u8>],
    lru: bool,
    engine: Engine,
) -> Result<usize, String> {
    let k = Kernel::load(obj);
    let mut s = Snic::load(obj, engine);
    seed_maps(name, &k, &s);
    let mut ran = 0;
    for (i, f) in frames.iter().enumerate() {
        let Some(want) = k.run(f) else { continue };
        ran += 1;
        let got = s.run(f, 1_000_000 + i as u64);
        if got != want {
            return Err(format!(
                "{name} ({engine:?}): frame {i} ({} bytes)\n  in:     {:02x?}\n  kernel: action {} bytes {:02x?}\n  snic:   action {} bytes {:02x?}",
                f.len(),
                f,
                want.0,
                want.1,
                got.0,
                got.1
            ));
        }
    }
    let (kc, sc) = map_contents(obj, &k, &s, lru);
    for ((name_k, ke), (_, se)) in kc.iter().zip(&sc) {
        if ke != se {
            let kd: Vec<_> = ke.iter().filter(|e| !se.contains(e)).take(5).collect();
            let sd: Vec<_> = se.iter().filter(|e| !ke.contains(e)).take(5).collect();
            return Err(format!(
                "{name} ({engine:?}): map {name_k} differs after {ran} frames ({} kernel entries, {} snic)\n  kernel only: {kd:02x?}\n  snic only:   {sd:02x?}",
                ke.len(),
                se.len()
            ));
        }
    }
    Ok(ran)
}

fn good_corpus() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../snic-ebpf/tests/corpus");
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            n.strip_prefix("good_").is_some().then(|| n.trim_end_matches(".c").to_string())
        })
        .collect();
    v.sort();
    v
}

#[test]
fn snic_matches_the_kernel_on_every_program() {
    if !ready("snic_matches_the_kernel_on_every_program") {
        return;
    }
    let frames = all_frames(SEED + 10, FRAMES);
    let mut programs: Vec<(String, Object)> =
        ["proto_count", "mac_swap", "udp_firewall", "vxlan_decap"]
            .iter()
            .map(|n| (n.to_string(), example(n)))
            .collect();
    programs.extend(good_corpus().into_iter().map(|n| {
        let o = corpus(&n);
        (n, o)
    }));
    let mut failures = Vec::new();
    for (name, obj) in &programs {
        for engine in [Engine::Interpreter, Engine::Jit] {
            match differential(name, obj, &frames, false, engine) {
                Ok(ran) => eprintln!("{name} ({engine:?}): {ran} frames agree"),
                Err(e) => failures.push(e),
            }
        }
    }
    assert!(programs.len() >= 25, "only {} programs", programs.len());
    assert!(
        failures.is_empty(),
        "{} of {} program runs (interpreter and JIT) differ from the kernel:\n\n{}",
        failures.len(),
        2 * programs.len(),
        failures.join("\n\n")
    );
}

/// LRU hashes agree too while they stay below capacity (no eviction): good_lru_hash keyed by
/// IPv4 destination, on the frames with at most 12 distinct destinations (16 entries).
#[test]
fn lru_hash_matches_the_kernel_below_capacity() {
    if !ready("lru_hash_matches_the_kernel_below_capacity") {
        return;
    }
    let all = all_frames(SEED + 11, FRAMES);
    let mut dsts: Vec<[u8; 4]> = Vec::new();
    let frames: Vec<Vec<u8>> = all
        .into_iter()
        .filter(|f| {
            if f.len() < 34 {
                return true;
            }
            let d: [u8; 4] = f[30..34].try_into().unwrap();
            if dsts.contains(&d) {
                return true;
            }
            if dsts.len() < 12 {
                dsts.push(d);
                return true;
            }
            false
        })
        .collect();
    for engine in [Engine::Interpreter, Engine::Jit] {
        let ran = differential("good_lru_hash", &corpus("good_lru_hash"), &frames, true, engine)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(ran > 1000, "only {ran} frames ran");
    }
}

/// The NIC-core example: core_checksum's result (and its copy in argument 1) is snic-wire's
/// Internet checksum of argument 0, for seeded random buffers of every length class,
/// including odd lengths, empty ones and ones past the program's 64 KiB window.
#[test]
fn core_checksum_is_the_internet_checksum() {
    use rand::{Rng, SeedableRng};
    if !snic_ebpf::testing::require_clang("core_checksum_is_the_internet_checksum") {
        return;
    }
    let obj = example("core_checksum");
    let maps = snic_ebpf::MapSet::new(&obj, 1).unwrap();
    let prog = snic_ebpf::core::CoreProgram::load(&obj, None, maps).unwrap();
    let mut w = snic_ebpf::Worker::new(0);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(SEED);
    let mut lens: Vec<usize> = vec![0, 1, 2, 3, 63, 64, 65, 127, 128, 1500, 9000, 65535, 65536];
    lens.extend((0..40).map(|_| rng.gen_range(0..4096)));
    for len in lens {
        let mut data: Vec<u8> = (0..len).map(|_| rng.r#gen()).collect();
        let mut out = [0u8; 2];
        let r = {
            let mut args: [&mut [u8]; 2] = [&mut data, &mut out];
            prog.run(&mut w, &mut args, &[0; 8]).unwrap_or_else(|f| panic!("len {len}: {f:?}"))
        };
        let want = !snic_wire::checksum::data(&data);
        assert_eq!(r, u64::from(want), "len {len}");
        assert_eq!(out, want.to_be_bytes(), "len {len}: the copy in argument 1");
    }
    // Scalar 0 is an initial sum: 0x1234 plus the word 0x0102 (carries folded back in too).
    for (init, want) in [(0x1234u64, !0x1336u16), (0xffff_0001, !0x0103u16)] {
        let mut d = [1u8, 2];
        let mut args: [&mut [u8]; 1] = [&mut d];
        let mut scalars = [0u64; 8];
        scalars[0] = init;
        assert_eq!(prog.run(&mut w, &mut args, &scalars).unwrap(), u64::from(want), "{init:#x}");
    }
    // Past 64 KiB only the first 64 KiB count.
    let data: Vec<u8> = (0..70_000).map(|_| rng.r#gen()).collect();
    let mut copy = data.clone();
    let mut args: [&mut [u8]; 1] = [&mut copy];
    let r = prog.run(&mut w, &mut args, &[0; 8]).unwrap();
    assert_eq!(r, u64::from(!snic_wire::checksum::data(&data[..65536])));
}
