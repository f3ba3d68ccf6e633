//! `stack::parse` never panics, on arbitrary bytes and on mutated or truncated valid frames, and
//! what it records is always consistent: layer offsets increase and lie inside the frame, the
//! payload offset lies inside the frame, and the tunnel, BTH and header summaries point at
//! recorded layers.

use proptest::prelude::*;
use snic_wire::stack::{self, Layer, Stack};

mod stack_common;
use stack_common::{ALL, hex};

fn check_consistent(frame: &[u8], s: &Stack) -> Result<(), TestCaseError> {
    let mut prev = None;
    for l in s.layers() {
        prop_assert!(usize::from(l.offset) < frame.len().max(1), "{:?} past the frame", l);
        if let Some(p) = prev {
            prop_assert!(l.offset > p, "offsets not increasing: {:?}", s.layers());
        }
        prev = Some(l.offset);
    }
    prop_assert!(usize::from(s.payload) <= frame.len());
    let recorded =
        |layer: Layer, off: u16| s.layers().iter().any(|l| l.layer == layer && l.offset == off);
    if let Some((layer, off)) = s.tunnel {
        prop_assert!(recorded(layer, off));
    }
    if let Some(off) = s.bth {
        prop_assert!(recorded(Layer::Bth, off));
        // `bth` means a RoCE packet that parsed whole; nothing is walked after it.
        prop_assert_eq!(s.error(), None);
    }
    // A RoCE packet that failed to parse never verifies: its parse error is the answer.
    if let Some((layer, e)) = s.error() {
        let roce = [
            Layer::Bth,
            Layer::Reth,
            Layer::Aeth,
            Layer::AtomicEth,
            Layer::AtomicAckEth,
            Layer::ImmDt,
            Layer::Ieth,
            Layer::Deth,
            Layer::Cnp,
            Layer::Feth,
        ];
        if roce.contains(&layer) {
            prop_assert_eq!(s.bth, None);
            prop_assert_eq!(s.verify_icrc(frame), Some(Err(e)));
        }
    }
    for h in [Some(s.outer), s.inner].into_iter().flatten() {
        if let Some(off) = h.eth {
            prop_assert!(recorded(Layer::Eth, off));
        }
        if let Some((layer, off)) = h.l3 {
            prop_assert!(recorded(layer, off));
        }
        if let Some((layer, off)) = h.l4 {
            prop_assert!(recorded(layer, off));
        }
    }
    // Re-parsing gives the same answer (no hidden state).
    prop_assert_eq!(&stack::parse(frame), s);
    // An ICRC check over whatever was parsed never panics either.
    let _ = s.verify_icrc(frame);
    Ok(())
}

fn vector() -> impl Strategy<Value = Vec<u8>> {
    (0..ALL.len()).prop_map(|i| hex(ALL[i].1))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let s = stack::parse(&bytes);
        check_consistent(&bytes, &s)?;
    }

    #[test]
    fn mutated_valid_frames(mut frame in vector(),
                            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)) {
        for (i, v) in edits {
            let i = i.index(frame.len());
            frame[i] = v;
        }
        let s = stack::parse(&frame);
        check_consistent(&frame, &s)?;
    }

    #[test]
    fn truncated_valid_frames(frame in vector(), cut in any::<prop::sample::Index>()) {
        let n = cut.index(frame.len() + 1);
        let s = stack::parse(&frame[..n]);
        check_consistent(&frame[..n], &s)?;
    }

    /// Ethertype/protocol/port bytes steer the walk: rewrite one of them to a value that picks
    /// another branch.
    #[test]
    fn steering_bytes(mut frame in vector(), pos in 0usize..4, v in prop::sample::select(vec![
        0x0800u16, 0x86dd, 0x0806, 0x8100, 0x88a8, 0x6558, 4789, 6081, 4791, 0x1100, 0x2f00, 0x0600,
    ])) {
        let s0 = stack::parse(&frame);
        let layers: Vec<_> = s0.layers().to_vec();
        if let Some(l) = layers.get(pos) {
            let at = usize::from(l.offset);
            let off = match l.layer {
                Layer::Eth => at + 12,
                Layer::Vlan => at + 2,
                Layer::Ipv4 => at + 9,
                Layer::Ipv6 => at + 6,
                Layer::Udp => at + 2,
                _ => at,
            };
            if off + 2 <= frame.len() {
                frame[off..off + 2].copy_from_slice(&v.to_be_bytes());
            }
        }
        let s = stack::parse(&frame);
        check_consistent(&frame, &s)?;
    }
}

#[test]
fn every_vector_is_consistent() {
    for (name, h) in ALL {
        let f = hex(h);
        let s = stack::parse(&f);
        check_consistent(&f, &s).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
