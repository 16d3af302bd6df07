//! The free blocks of one usage pool, ordered for best fit: by class key,
//! then size, then block index (so among equal sizes the lowest index wins);
//! a followed plan's blocks by class key, then segment and offset
//! ([`BY_OFFSET`]).
//!
//! Each entry is packed into one `u128` (key in bits 96–103, size in 32–95,
//! index in 0–31), whose integer order is the order of the
//! `(key, size, index)` tuple: one integer compare per entry instead of
//! three fields. Natively the entries are kept in a sorted `Vec` while there
//! are few, and in a `BTreeSet` once there are many (the browser build keeps
//! the `BTreeSet` alone: see `mod tree`). Replaying the corpus an engine
//! holds 7–161 free blocks on average over all its pools, at most 238: there
//! a binary search and a short `memmove` beat a B-tree's descent and node
//! shuffles; a pool fragmented into thousands of free blocks does not pay a
//! long `memmove` per operation. A best-fit lookup walks from the request's
//! size to the end of its class instead of bounding the range first (one
//! search, not two: a request reads one entry or a few). The index was about
//! half of a profile of the engine replaying real traces; with these two
//! changes `vrampool replay --simulate` of the 24 traces went from 116–126 to
//! 96–98 ns per operation on a 2-core VM (about 20 of them the replay's own),
//! and allocate + free beside 100 000 free blocks from 307 to 257 ns
//! (BENCHMARKS.md, "The free index as a sorted vector").

/// The key of blocks in a followed plan's segments
/// ([`SegmentClass::Planned`](crate::SegmentClass::Planned)): their entries
/// hold `segment << 40 | offset` where the others hold the size, so the
/// block at a planned offset is one lookup away ([`FreeIndex::at_or_below`]).
/// No request searches this key by size.
pub(super) const BY_OFFSET: u8 = 5;

fn pack(key: u8, size: u64, index: u32) -> u128 {
    (key as u128) << 96 | (size as u128) << 32 | index as u128
}

fn unpack(e: u128) -> (u8, u64, u32) {
    ((e >> 96) as u8, (e >> 32) as u64, e as u32)
}

#[derive(Debug, Default)]
pub(super) struct FreeIndex(Entries);

#[cfg(not(target_arch = "wasm32"))]
use vector_or_tree::Entries;

/// The entries, natively: a sorted `Vec` while there are few, a `BTreeSet`
/// once there are many.
#[cfg(not(target_arch = "wasm32"))]
mod vector_or_tree {
    use std::collections::BTreeSet;
    use std::collections::btree_set;

    /// Entries above which a sorted `Vec` becomes a `BTreeSet`.
    pub(super) const TO_TREE: usize = 512;
    /// Entries below which a `BTreeSet` becomes a sorted `Vec` again (well
    /// under [`TO_TREE`], so a pool hovering at the edge does not convert
    /// back and forth).
    const TO_VEC: usize = 128;

    #[derive(Debug)]
    pub(super) enum Entries {
        /// Sorted, no duplicates.
        Vec(Vec<u128>),
        Tree(BTreeSet<u128>),
    }

    impl Default for Entries {
        fn default() -> Self {
            Entries::Vec(Vec::new())
        }
    }

    /// The entries of a range, from either representation.
    pub(super) enum Range<'a> {
        Vec(std::slice::Iter<'a, u128>),
        Tree(btree_set::Range<'a, u128>),
    }

    impl Iterator for Range<'_> {
        type Item = u128;
        #[inline]
        fn next(&mut self) -> Option<u128> {
            match self {
                Range::Vec(i) => i.next().copied(),
                Range::Tree(i) => i.next().copied(),
            }
        }
    }

    impl DoubleEndedIterator for Range<'_> {
        #[inline]
        fn next_back(&mut self) -> Option<u128> {
            match self {
                Range::Vec(i) => i.next_back().copied(),
                Range::Tree(i) => i.next_back().copied(),
            }
        }
    }

    impl Entries {
        /// The entries in `lo..hi` (`hi` `None`: to the end).
        #[inline]
        pub(super) fn range(&self, lo: u128, hi: Option<u128>) -> Range<'_> {
            match self {
                Entries::Vec(v) => {
                    let start = v.partition_point(|&e| e < lo);
                    let end = hi.map_or(v.len(), |hi| v.partition_point(|&e| e < hi));
                    Range::Vec(v[start..end.max(start)].iter())
                }
                Entries::Tree(t) => Range::Tree(match hi {
                    Some(hi) if hi <= lo => t.range(lo..lo),
                    Some(hi) => t.range(lo..hi),
                    None => t.range(lo..),
                }),
            }
        }

        #[cold]
        #[inline(never)]
        fn grow_into_tree(&mut self) {
            if let Entries::Vec(v) = self {
                *self = Entries::Tree(std::mem::take(v).into_iter().collect());
            }
        }

        #[cold]
        #[inline(never)]
        fn shrink_into_vec(&mut self) {
            if let Entries::Tree(t) = self {
                // In order, so the `Vec` is sorted.
                *self = Entries::Vec(std::mem::take(t).into_iter().collect());
            }
        }

        #[inline]
        pub(super) fn insert(&mut self, e: u128) {
            match self {
                Entries::Vec(v) => {
                    if let Err(i) = v.binary_search(&e) {
                        v.insert(i, e);
                        if v.len() > TO_TREE {
                            self.grow_into_tree();
                        }
                    }
                }
                Entries::Tree(t) => {
                    t.insert(e);
                }
            }
        }

        #[inline]
        pub(super) fn remove(&mut self, e: u128) {
            match self {
                Entries::Vec(v) => {
                    if let Ok(i) = v.binary_search(&e) {
                        v.remove(i);
                    }
                }
                Entries::Tree(t) => {
                    t.remove(&e);
                    if t.len() < TO_VEC {
                        self.shrink_into_vec();
                    }
                }
            }
        }

        #[inline]
        pub(super) fn contains(&self, e: u128) -> bool {
            match self {
                Entries::Vec(v) => v.binary_search(&e).is_ok(),
                Entries::Tree(t) => t.contains(&e),
            }
        }

        pub(super) fn len(&self) -> usize {
            match self {
                Entries::Vec(v) => v.len(),
                Entries::Tree(t) => t.len(),
            }
        }

        /// Whether the entries are in the tree (for tests).
        #[cfg(test)]
        pub(super) fn is_tree(&self) -> bool {
            matches!(self, Entries::Tree(_))
        }
    }
}

#[cfg(target_arch = "wasm32")]
use tree::Entries;

/// The entries in the browser: the `BTreeSet` alone. The vector's code is
/// 3.5 KB of the page's gzipped wasm (386 194 → 389 741 bytes), a tenth of
/// what is left under its 400 KB target, and the browser's pools hold few
/// blocks and spend their time in the device's callbacks, not here.
#[cfg(target_arch = "wasm32")]
mod tree {
    use std::collections::BTreeSet;

    #[derive(Debug, Default)]
    pub(super) struct Entries(BTreeSet<u128>);

    impl Entries {
        /// The entries in `lo..hi` (`hi` `None`: to the end).
        #[inline]
        pub(super) fn range(
            &self,
            lo: u128,
            hi: Option<u128>,
        ) -> impl DoubleEndedIterator<Item = u128> + '_ {
            match hi {
                Some(hi) if hi <= lo => self.0.range(lo..lo),
                Some(hi) => self.0.range(lo..hi),
                None => self.0.range(lo..),
            }
            .copied()
        }

        #[inline]
        pub(super) fn insert(&mut self, e: u128) {
            self.0.insert(e);
        }

        #[inline]
        pub(super) fn remove(&mut self, e: u128) {
            self.0.remove(&e);
        }

        #[inline]
        pub(super) fn contains(&self, e: u128) -> bool {
            self.0.contains(&e)
        }

        pub(super) fn len(&self) -> usize {
            self.0.len()
        }
    }
}

impl FreeIndex {
    #[inline]
    pub(super) fn insert(&mut self, key: u8, size: u64, index: u32) {
        self.0.insert(pack(key, size, index));
    }

    #[inline]
    pub(super) fn remove(&mut self, key: u8, size: u64, index: u32) {
        self.0.remove(pack(key, size, index));
    }

    #[inline]
    pub(super) fn contains(&self, key: u8, size: u64, index: u32) -> bool {
        self.0.contains(pack(key, size, index))
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// The free blocks of class `key` that hold `size` bytes, smallest
    /// first, as (size, index).
    #[inline]
    pub(super) fn fits(&self, key: u8, size: u64) -> impl Iterator<Item = (u64, u32)> + '_ {
        // Up to the next class's first entry, found by walking (a request
        // reads one entry or a few), not by a second search.
        let end = key.checked_add(1).map_or(u128::MAX, |k| pack(k, 0, 0));
        self.0
            .range(pack(key, size, 0), None)
            .take_while(move |&e| e < end)
            .map(|e| {
                let (_, size, index) = unpack(e);
                (size, index)
            })
    }

    /// The last entry of class `key` at or below `value`, as (value, index).
    pub(super) fn at_or_below(&self, key: u8, value: u64) -> Option<(u64, u32)> {
        let end = pack(key, value, u32::MAX).checked_add(1);
        let (_, v, i) = unpack(self.0.range(pack(key, 0, 0), end).next_back()?);
        Some((v, i))
    }

    /// The largest free block of any class but [`BY_OFFSET`]'s (a plan's
    /// blocks serve only the requests it placed there): the last entry of
    /// each class (the index is ordered by class, then size), found by
    /// stepping back from one class to the one below, so a few lookups, not
    /// a walk.
    pub(super) fn largest(&self) -> Option<u64> {
        let mut largest = None;
        let mut below = self.0.range(0, None).next_back();
        while let Some(e) = below {
            let (key, size, _) = unpack(e);
            if key != BY_OFFSET {
                largest = largest.max(Some(size));
            }
            below = self.0.range(0, Some(pack(key, 0, 0))).next_back();
        }
        largest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn packed_order_is_the_tuple_order() {
        let entries = [
            (0u8, 5u64, 7u32),
            (0, 5, 2),
            (0, u64::MAX, 0),
            (1, 0, u32::MAX),
            (1, 1 << 40, 3),
            (2, 256, 1),
            (u8::MAX, 1, 1),
        ];
        let mut tuples = entries.to_vec();
        tuples.sort();
        let mut packed: Vec<u128> = entries.iter().map(|&(k, s, i)| pack(k, s, i)).collect();
        packed.sort();
        let unpacked: Vec<_> = packed.into_iter().map(unpack).collect();
        assert_eq!(unpacked, tuples);
    }

    fn best_fit(f: &FreeIndex, key: u8, size: u64) -> Option<(u64, u32)> {
        f.fits(key, size).next()
    }

    #[test]
    fn best_fit_stays_in_its_class() {
        let mut f = FreeIndex::default();
        f.insert(1, 4096, 9);
        f.insert(1, 4096, 3);
        f.insert(1, 1 << 20, 4);
        f.insert(2, 512, 5);
        assert_eq!(best_fit(&f, 1, 4000), Some((4096, 3)));
        assert_eq!(best_fit(&f, 1, 8192), Some((1 << 20, 4)));
        assert_eq!(
            best_fit(&f, 1, 2 << 20),
            None,
            "class 2's block is not class 1's"
        );
        assert_eq!(best_fit(&f, 2, 1), Some((512, 5)));
        f.remove(1, 4096, 3);
        assert_eq!(best_fit(&f, 1, 1), Some((4096, 9)));
        assert!(f.contains(2, 512, 5) && !f.contains(1, 4096, 3));
        assert_eq!((f.len(), f.largest()), (3, Some(1 << 20)));
    }

    #[test]
    fn the_largest_block_is_found_in_whichever_class_holds_it() {
        let mut f = FreeIndex::default();
        assert_eq!(f.largest(), None);
        // Class 2 holds the big blocks, the classes above and below it small
        // ones: the answer needs the steps back from the last class.
        let mut x = 0x9E37_79B9u64;
        let mut most = 0;
        for i in 0..2000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = [0u8, 1, 2, 4, u8::MAX][(x % 5) as usize];
            let bound = if key == 2 { 1 << 30 } else { 1 << 20 };
            let size = (x >> 8) % bound;
            f.insert(key, size, i);
            most = most.max(size);
            assert_eq!(f.largest(), Some(most), "after {i} inserts");
        }
        assert!(f.0.is_tree(), "2 000 entries are a tree");
        let top = |f: &FreeIndex| f.0.range(0, None).next_back().map(|e| unpack(e).1);
        assert!(top(&f) < f.largest(), "the last entry is not the answer");
        // Without class 2, the largest of the others, found the same way
        // (in the tree, then in the sorted vector it becomes).
        let class_2: Vec<u128> = f.0.range(0, None).filter(|&e| unpack(e).0 == 2).collect();
        let brute =
            f.0.range(0, None)
                .filter(|&e| unpack(e).0 != 2)
                .map(|e| unpack(e).1)
                .max();
        for e in class_2 {
            let (key, size, index) = unpack(e);
            f.remove(key, size, index);
            let left = f.0.range(0, None).filter(|&e| unpack(e).0 != BY_OFFSET);
            assert_eq!(f.largest(), left.map(|e| unpack(e).1).max());
        }
        assert_eq!(f.largest(), brute);
        let others: Vec<u128> = f.0.range(0, None).collect();
        for &e in &others[..others.len() - 100] {
            let (key, size, index) = unpack(e);
            f.remove(key, size, index);
        }
        assert!(!f.0.is_tree(), "100 entries are a vector");
        let brute = others[others.len() - 100..]
            .iter()
            .map(|&e| unpack(e).1)
            .max();
        assert_eq!(f.largest(), brute);
    }

    /// Every lookup answers as a `BTreeSet` of the same entries would, while
    /// the index grows past `TO_TREE` into a tree and shrinks below
    /// `TO_VEC` into a vector again, twice, removes and inserts of absent
    /// and present entries among them.
    #[test]
    fn both_representations_answer_as_one_ordered_set() {
        let mut f = FreeIndex::default();
        let mut model = BTreeSet::new();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut was_tree = false;
        let mut conversions = 0;
        for round in 0..4 {
            let growing = round % 2 == 0;
            for _ in 0..3000 {
                let r = next();
                let key = [0u8, 1, 2, BY_OFFSET, u8::MAX][(r % 5) as usize];
                let (size, index) = ((r >> 8) % 64, (r >> 20) as u32 % 64);
                // Three of four steps insert while growing, one of eight
                // while shrinking; a remove takes a present entry seven
                // times in eight.
                let insert = if growing {
                    (r >> 40) % 4 != 0
                } else {
                    (r >> 40) % 8 == 0
                };
                let e = if !insert && (r >> 44) % 8 != 0 && !model.is_empty() {
                    *model.iter().nth((r >> 48) as usize % model.len()).unwrap()
                } else {
                    pack(key, size, index)
                };
                let (key, size, index) = unpack(e);
                if insert {
                    f.insert(key, size, index);
                    model.insert(e);
                } else {
                    f.remove(key, size, index);
                    model.remove(&e);
                }
                assert_eq!(f.len(), model.len());
                assert_eq!(f.contains(key, size, index), model.contains(&e));
                let want: Vec<(u64, u32)> = model
                    .range(pack(key, size, 0)..)
                    .take_while(|&&m| unpack(m).0 == key)
                    .map(|&m| (unpack(m).1, unpack(m).2))
                    .collect();
                assert_eq!(f.fits(key, size).collect::<Vec<_>>(), want);
                let below = model
                    .range(pack(key, 0, 0)..=pack(key, size, u32::MAX))
                    .next_back()
                    .map(|&m| (unpack(m).1, unpack(m).2));
                assert_eq!(f.at_or_below(key, size), below);
                let largest = model
                    .iter()
                    .filter(|&&m| unpack(m).0 != BY_OFFSET)
                    .map(|&m| unpack(m).1)
                    .max();
                assert_eq!(f.largest(), largest);
                let tree = f.0.is_tree();
                conversions += usize::from(tree != was_tree);
                was_tree = tree;
            }
        }
        assert!(
            conversions == 4,
            "the test grew into a tree and back twice, no more ({conversions} conversions): the thresholds' hysteresis"
        );
    }
}
