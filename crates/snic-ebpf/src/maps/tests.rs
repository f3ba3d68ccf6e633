//! Unit tests of each map type's semantics, flags and error codes.

use super::*;

fn spec(kind: MapKind, key: u32, value: u32, max: u32) -> MapSpec {
    MapSpec {
        name: format!("m_{}", kind.name()),
        kind,
        key_size: key,
        value_size: value,
        max_entries: max,
        data: None,
        readonly: false,
    }
}

fn k(i: u32) -> [u8; 4] {
    i.to_ne_bytes()
}

#[test]
fn array_flags_and_errors() {
    let m = Map::new(&spec(MapKind::Array, 4, 8, 4), 2).unwrap();
    assert_eq!(m.get(&k(3)), Some(vec![0; 8]));
    m.update(&k(3), &7u64.to_ne_bytes(), BPF_ANY, 0).unwrap();
    assert_eq!(m.get(&k(3)), Some(7u64.to_ne_bytes().to_vec()));
    assert_eq!(m.update(&k(3), &[0; 8], BPF_NOEXIST, 0), Err(MapError::Exists));
    m.update(&k(3), &[1; 8], BPF_EXIST, 0).unwrap();
    assert_eq!(m.update(&k(4), &[0; 8], BPF_ANY, 0).unwrap_err().errno(), -errno::E2BIG);
    assert_eq!(m.update(&k(0), &[0; 8], 4, 0).unwrap_err().errno(), -errno::EINVAL);
    assert_eq!(m.lookup(&k(4), 0), None);
    assert_eq!(m.delete(&k(0)).unwrap_err().errno(), -errno::EINVAL);
    let a = m.lookup(&k(1), 1).unwrap();
    assert_eq!(a, m.base() + 8);
    assert_eq!(a % 8, 0);
    assert_eq!(m.contains(a, 8), Some(true));
    assert_eq!(m.contains(a + 4, 8), None);
    assert_eq!(m.entries().len(), 4);
}
