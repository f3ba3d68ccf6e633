//! Software prefetch: ask the CPU to start loading the cache line of a value that the fast path
//! will read a little later, without waiting for it.
//!
//! [`prefetch_read`] is the crate's one `unsafe` block: on x86-64 it issues `PREFETCHT0`
//! (`_mm_prefetch` with `_MM_HINT_T0`, which rustc 1.95 still declares `unsafe`). A prefetch is
//! a hint: it never faults, never changes memory or any register the program sees, and the
//! value is only ever read through the safe reference later. On other architectures it does
//! nothing (the fast path is then as fast as without it, no less correct).
#![allow(
    unsafe_code,
    reason = "`_mm_prefetch` is an unsafe intrinsic; the one block has a SAFETY comment"
)]

/// Start loading the cache line that holds the start of `*r` into all cache levels.
#[inline(always)]
pub(crate) fn prefetch_read<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let p: *const i8 = (r as *const T).cast();
        // SAFETY: `PREFETCHT0` only hints the cache: it never faults (not even on an invalid
        // address, and `p` comes from a live reference anyway), writes no memory and leaves
        // every architectural register unchanged. SSE, which the intrinsic needs, is part of
        // the x86-64 baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = r;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prefetch is only a hint: the values it touched read back unchanged, whatever their
    /// type and alignment.
    #[test]
    fn prefetch_changes_nothing() {
        let v: Vec<u64> = (0..1024).collect();
        for x in &v {
            prefetch_read(x);
        }
        let bytes = [7u8; 3];
        prefetch_read(&bytes[1]);
        prefetch_read(&());
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64));
        assert_eq!(bytes, [7; 3]);
    }
}
