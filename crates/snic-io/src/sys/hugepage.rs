//! Transparent huge pages for large tables (the vSwitch's flow tables).
//!
//! At a million flows and more a flow-table lookup is bound by TLB misses on 4 KiB pages.
//! Machines usually run transparent huge pages in `madvise` mode, so the regions must ask for
//! them: [`advise`] calls `madvise(MADV_HUGEPAGE)` on each region (shrunk inward to page
//! boundaries). Pages already touched stay small until the kernel collapses them; pages touched
//! later are faulted in as huge pages where the kernel can.
#![allow(unsafe_code, reason = "madvise(2) through libc; the one block has a SAFETY comment")]

use std::io;

const PAGE: usize = 4096;

/// Ask for huge pages on every `(address, length)` region. Returns the bytes advised; an error
/// from the kernel (THP disabled, `EINVAL`) is returned for the first region that failed, after
/// trying all of them.
pub fn advise(regions: &[(usize, usize)]) -> io::Result<usize> {
    let mut advised = 0;
    let mut first_err = None;
    for &(addr, len) in regions {
        let start = addr.checked_add(PAGE - 1).map(|a| a & !(PAGE - 1));
        let end = addr.checked_add(len).map(|e| e & !(PAGE - 1));
        let (Some(start), Some(end)) = (start, end) else { continue };
        if end <= start {
            continue;
        }
        // SAFETY: `madvise` with MADV_HUGEPAGE only changes how the kernel backs the pages of
        // the range; it never changes their contents or frees them. The range lies inside a
        // live allocation the caller owns (it was shrunk inward to page boundaries), so no
        // other mapping is affected.
        let rc =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        if rc == 0 {
            advised += end - start;
        } else if first_err.is_none() {
            first_err = Some(io::Error::last_os_error());
        }
    }
    match first_err {
        Some(e) if advised == 0 => Err(e),
        _ => Ok(advised),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advises_whole_pages_inside_the_region() {
        let v: Vec<u8> = Vec::with_capacity(8 << 20);
        let r = advise(&[(v.as_ptr() as usize, v.capacity())]);
        match r {
            // Inside an 8 MiB region at least 8 MiB - 2 pages can be advised.
            Ok(n) => assert!(((8 << 20) - 2 * PAGE..=8 << 20).contains(&n), "{n}"),
            // Kernels without THP refuse; that must be an error, not a panic.
            Err(e) => assert!(e.raw_os_error().is_some()),
        }
        assert_eq!(advise(&[(4097, 100)]).unwrap(), 0, "a region smaller than a page");
    }
}
