//! Neighbor Discovery properties: every message we can describe round-trips through emit and
//! parse; any bytes either parse or give a typed error, never a panic, and what parses re-emits
//! to a message that parses the same.

use proptest::prelude::*;
use snic_wire::ethernet::EthernetAddress;
use snic_wire::ndisc::{self, Repr};
use std::net::Ipv6Addr;

fn unicast() -> impl Strategy<Value = Ipv6Addr> {
    any::<[u8; 16]>().prop_map(|mut o| {
        if o[0] == 0xff {
            o[0] = 0xfd;
        }
        Ipv6Addr::from(o)
    })
}

fn lladdr() -> impl Strategy<Value = Option<EthernetAddress>> {
    proptest::option::of(any::<[u8; 6]>().prop_map(EthernetAddress))
}

fn repr() -> impl Strategy<Value = Repr> {
    prop_oneof![
        (unicast(), lladdr())
            .prop_map(|(target, source_lladdr)| Repr::Solicit { target, source_lladdr }),
        (0u8..8, unicast(), lladdr()).prop_map(|(f, target, target_lladdr)| Repr::Advert {
            flags: f << 5,
            target,
            target_lladdr
        }),
    ]
}

proptest! {
    #[test]
    fn every_message_round_trips(r in repr()) {
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b).unwrap();
        prop_assert_eq!(Repr::parse(&b).unwrap(), r);
    }

    #[test]
    fn any_bytes_parse_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..96),
                                       kind in prop_oneof![Just(135u8), Just(136u8), any::<u8>()]) {
        let mut bytes = bytes;
        if let Some(b) = bytes.first_mut() {
            *b = kind;
        }
        if let Ok(r) = Repr::parse(&bytes) {
            let mut again = vec![0u8; r.buffer_len()];
            r.emit(&mut again).unwrap();
            prop_assert_eq!(Repr::parse(&again).unwrap(), r);
            let target = match r {
                Repr::Solicit { target, .. } | Repr::Advert { target, .. } => target,
            };
            prop_assert!(!target.is_multicast());
        }
    }

    #[test]
    fn solicited_node_keeps_the_low_24_bits(a in any::<[u8; 16]>()) {
        let g = ndisc::solicited_node(Ipv6Addr::from(a)).octets();
        prop_assert_eq!(&g[..13], &[0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff][..]);
        prop_assert_eq!(&g[13..], &a[13..]);
    }
}
