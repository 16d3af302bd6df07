//! The free blocks of one usage pool, ordered for best fit: by class key,
//! then size, then block index (so among equal sizes the lowest index wins);
//! a followed plan's blocks by class key, then segment and offset
//! ([`BY_OFFSET`]).
//!
//! Each entry is packed into one `u128` (key in bits 96–103, size in 32–95,
//! index in 0–31), whose integer order is the order of the
//! `(key, size, index)` tuple: a B-tree node compares one integer per entry
//! instead of three fields. The B-tree's inserts, removes and lookups were
//! about half of a profile of `core/benches/hot_path.rs`.

use std::collections::BTreeSet;

#[derive(Debug, Default)]
pub(super) struct FreeIndex(BTreeSet<u128>);

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

impl FreeIndex {
    pub(super) fn insert(&mut self, key: u8, size: u64, index: u32) {
        self.0.insert(pack(key, size, index));
    }

    pub(super) fn remove(&mut self, key: u8, size: u64, index: u32) {
        self.0.remove(&pack(key, size, index));
    }

    pub(super) fn contains(&self, key: u8, size: u64, index: u32) -> bool {
        self.0.contains(&pack(key, size, index))
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// The free blocks of class `key` that hold `size` bytes, smallest
    /// first, as (size, index).
    pub(super) fn fits(&self, key: u8, size: u64) -> impl Iterator<Item = (u64, u32)> + '_ {
        let start = pack(key, size, 0);
        let end = pack(key.wrapping_add(1), 0, 0);
        let range = if key == u8::MAX {
            self.0.range(start..)
        } else {
            self.0.range(start..end)
        };
        range.map(|&e| {
            let (_, size, index) = unpack(e);
            (size, index)
        })
    }

    /// The last entry of class `key` at or below `value`, as (value, index).
    pub(super) fn at_or_below(&self, key: u8, value: u64) -> Option<(u64, u32)> {
        let (_, v, i) = unpack(
            *self
                .0
                .range(pack(key, 0, 0)..=pack(key, value, u32::MAX))
                .next_back()?,
        );
        Some((v, i))
    }

    /// The largest free block of any class but [`BY_OFFSET`]'s (a plan's
    /// blocks serve only the requests it placed there): the last entry of
    /// each class (the index is ordered by class, then size), found by
    /// stepping back from one class to the one below, so a few lookups, not
    /// a walk.
    pub(super) fn largest(&self) -> Option<u64> {
        let mut largest = None;
        let mut below = self.0.last().copied();
        while let Some(e) = below {
            let (key, size, _) = unpack(e);
            if key != BY_OFFSET {
                largest = largest.max(Some(size));
            }
            below = self.0.range(..pack(key, 0, 0)).next_back().copied();
        }
        largest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let top = |f: &FreeIndex| f.0.last().map(|&e| unpack(e).1);
        assert!(top(&f) < f.largest(), "the last entry is not the answer");
        // Without class 2, the largest of the others, found the same way.
        f.0.retain(|&e| unpack(e).0 != 2);
        let brute = f.0.iter().map(|&e| unpack(e).1).max();
        assert_eq!(f.largest(), brute);
    }
}
