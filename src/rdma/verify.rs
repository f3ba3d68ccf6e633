//! The data a benchmark moves and how the receiving side checks it: per-slot message bodies,
//! a per-iteration header, and the marker a latency ping-pong waits for.

/// Body byte `j` of a message in buffer slot `slot` (fixed per slot, so filling is done once
/// per size).
fn body_byte(slot: u64, j: usize) -> u8 {
    let j = j as u64;
    (j.wrapping_mul(0x45) ^ (j >> 8).wrapping_mul(0x9d) ^ slot.wrapping_mul(0x3b) ^ 0x5a) as u8
}

/// The first 8 bytes of iteration `i`'s message: a tag that changes every iteration.
pub(super) fn header(i: u64, size: u32) -> [u8; 8] {
    (i.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(size)).to_le_bytes()
}

/// The whole message of iteration `i` from slot `slot`.
pub(super) fn message(i: u64, slot: u64, size: u32) -> Vec<u8> {
    let mut m: Vec<u8> = (0..size as usize).map(|j| body_byte(slot, j)).collect();
    let h = header(i, size);
    let n = m.len().min(8);
    m[..n].copy_from_slice(&h[..n]);
    m
}

/// The marker a latency ping-pong waits for in the last byte of the message (never 0, the
/// value of a cleared buffer, and never the previous iteration's).
pub(super) fn marker(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

/// First offset where `got` differs from iteration `i`'s message whose slot body is `body`
/// (`message(_, slot, size)`): the header is compared apart, so no message is built.
pub(super) fn check_message(got: &[u8], i: u64, body: &[u8]) -> Option<usize> {
    let h = header(i, body.len() as u32);
    let n = got.len().min(8);
    if let Some(o) = first_diff(&got[..n], &h[..n.min(body.len())]) {
        return Some(o);
    }
    first_diff(&got[n..], body.get(n..).unwrap_or_default()).map(|o| o + n)
}

/// First offset where `a` and `b` differ (the shorter one's length when one is a prefix of
/// the other). Equal slices, the common case, cost one `memcmp`: the receiver of a SEND
/// benchmark checks every message as it lands, and a byte-by-byte scan of 64 KiB took more
/// of its CPU than receiving the message did.
pub(super) fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    if a == b {
        return None;
    }
    // Find the differing 4 KiB block with `memcmp`, then the byte inside it.
    let n = a.len().min(b.len());
    let block = (0..n)
        .step_by(4096)
        .find(|&i| {
            let e = (i + 4096).min(n);
            a[i..e] != b[i..e]
        })
        .unwrap_or(n);
    a[block..n].iter().zip(&b[block..n]).position(|(x, y)| x != y).map(|o| block + o).or(Some(n))
}

/// The message of ping-pong iteration `i` (both directions): header, body, marker last.
pub(super) fn lat_message(i: u64, size: u32) -> Vec<u8> {
    let mut m = message(i, 0, size);
    if let Some(b) = m.last_mut() {
        *b = marker(i);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_differ_per_iteration_and_markers_cycle() {
        assert_ne!(message(1, 0, 64), message(2, 0, 64));
        assert_eq!(message(1, 3, 64)[8..], message(9, 3, 64)[8..]);
        assert_eq!(message(5, 0, 2).len(), 2);
        assert_ne!(marker(0), marker(1));
        assert!((0..1000).all(|i| marker(i) != 0 && marker(i) != marker(i + 1)));
        assert_eq!(first_diff(b"abc", b"abd"), Some(2));
        let body = message(0, 3, 64);
        assert_eq!(check_message(&message(7, 3, 64), 7, &body), None);
        assert_eq!(check_message(&message(8, 3, 64), 7, &body), Some(0));
        let mut bad = message(7, 3, 64);
        bad[40] ^= 1;
        assert_eq!(check_message(&bad, 7, &body), Some(40));
        assert_eq!(check_message(&message(7, 0, 4), 7, &message(0, 0, 4)), None);
        assert_eq!(first_diff(b"abc", b"abc"), None);
        assert_eq!(first_diff(b"abc", b"ab"), Some(2));
        assert_eq!(first_diff(b"", b"a"), Some(0));
        // Past the first 4 KiB block, and in the last partial block.
        let a = message(0, 1, 10_000);
        for at in [0, 4095, 4096, 5000, 9999] {
            let mut b = a.clone();
            b[at] ^= 0x80;
            assert_eq!(first_diff(&a, &b), Some(at), "at {at}");
        }
    }
}
