//! The v1model executor on small programs, judged by STF.

mod common;

use common::{SMALL, stf};

#[test]
fn small_forwards_by_exact_match_and_drops_on_miss_with_noaction() {
    let t = "add t hdr.eth.dst:0x000000000001 I.fwd(port:2)\n\
             packet 0 000000000001 000000000002 0800 ab\n\
             expect 2 000000000001 000000000002 0800 ab\n\
             packet 0 000000000009 000000000002 0800 ab\n\
             expect 0 000000000009 000000000002 0800 ab\n";
    assert_eq!(stf(SMALL, t), Ok(true));
}
