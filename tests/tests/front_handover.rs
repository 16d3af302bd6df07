//! A front cache passes to the next pool when its pool goes; a handle that
//! outlived the old pool must not park in it then. Alone in its test binary,
//! so the next pool made is the one that takes the old pool's cache (other
//! tests making pools at the same time would take it instead).

use vrampool::AllocDesc;
use vrampool_tests::pool_with;

#[test]
fn a_handle_outliving_its_pool_parks_nowhere() {
    let desc = AllocDesc::storage(4096).read_write();
    let old = pool_with(Default::default());
    let kept = old.alloc(desc).unwrap();
    drop(old);
    let new = pool_with(Default::default());
    drop(kept); // the old pool's block: it must not park in the new pool's cache
    new.submitted();
    let b = new.alloc(desc).unwrap();
    new.check_invariants().unwrap();
    let s = new.stats();
    assert_eq!((s.counters.cache_hits, s.counters.device_allocs), (0, 1));
    assert_ne!(b.buffer().size(), 0);
}
