//! What a device's own allocator does with the segments the pool makes.
//!
//! wgpu on Vulkan does not give every buffer memory of its own: gpu-allocator
//! places each buffer up to a block's size in shared blocks of device memory
//! (128 MiB, then 256 MiB under wgpu's default `MemoryHints::Performance`),
//! newest block first, best fit inside it, and frees a block only once it is
//! empty (never the last one). A 150 MiB segment alone in a 256 MiB block
//! leaves 106 MiB that only a smaller segment can use; releasing a 98 MiB
//! segment beside others frees nothing. [`Suballocation`] describes such an
//! allocator; the engine keeps a model of its blocks (`DeviceBlocks`) and
//! sizes a new segment to the gap the device would put it in
//! ([`Config::fit_device_blocks`](crate::Config::fit_device_blocks)).
//!
//! Not in wasm32 builds: a browser's WebGPU tells nothing of its allocator,
//! and the page's wasm has a size target. There [`Backend::suballocation`]
//! is never asked and segments are sized as without it.
//!
//! [`Backend::suballocation`]: crate::Backend::suballocation

const MIB: u64 = 1 << 20;

/// How a device's allocator holds the segments of one kind of memory: in
/// shared blocks of `min_block` bytes at first, each new block twice the
/// last up to `max_block`; a segment larger than the next block gets memory
/// of its own. Segments of different `memory` never share a block (they are
/// of different memory types: device-local, or mappable).
///
/// ```
/// use vrampool::Suballocation;
/// // wgpu-hal 30 under MemoryHints::Performance, device-local memory.
/// let s = Suballocation::new(128 << 20, 256 << 20, 0);
/// assert_eq!((s.min_block(), s.max_block()), (128 << 20, 256 << 20));
/// // gpu-allocator takes 4–256 MiB blocks, in whole 4 MiB.
/// assert_eq!(Suballocation::new(1 << 20, 1 << 30, 0).max_block(), 256 << 20);
/// // The device's own bytes never take more than the first block.
/// assert_eq!(Suballocation::new(4 << 20, 4 << 20, 0).with_head(1 << 30).head(), 4 << 20);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Suballocation {
    min_block: u64,
    max_block: u64,
    memory: u32,
    head: u64,
    pad: u64,
}

impl Suballocation {
    /// Block sizes as gpu-allocator takes them: each clamped to 4–256 MiB and
    /// rounded up to whole 4 MiB, the largest at least the first. `memory`
    /// names the kind of memory: segments of different ones never share a
    /// block.
    pub fn new(min_block: u64, max_block: u64, memory: u32) -> Self {
        let adjust = |size: u64| size.clamp(4 * MIB, 256 * MIB).div_ceil(4 * MIB) * 4 * MIB;
        let min_block = adjust(min_block);
        Suballocation {
            min_block,
            max_block: adjust(max_block).max(min_block),
            memory,
            head: 0,
            pad: 0,
        }
    }

    /// The same blocks, the first made before the pool's first segment with
    /// `bytes` of the device's own at its start (at most the block): wgpu
    /// makes a 512 KiB zero buffer in device-local memory with every device.
    pub fn with_head(mut self, bytes: u64) -> Self {
        self.head = bytes.min(self.min_block);
        self
    }

    /// The same blocks, each segment taking `bytes` more than its size
    /// (at most 1 MiB): wgpu makes a buffer that may be bound as vertices
    /// 4 bytes longer, which the driver rounds up to its alignment.
    pub fn with_pad(mut self, bytes: u64) -> Self {
        self.pad = bytes.min(MIB);
        self
    }

    /// The first block's size.
    pub fn min_block(&self) -> u64 {
        self.min_block
    }

    /// The largest block's size.
    pub fn max_block(&self) -> u64 {
        self.max_block
    }

    /// Which memory the blocks are of.
    pub fn memory(&self) -> u32 {
        self.memory
    }

    /// The device's own bytes at the start of its first block (0: no block
    /// until the first segment).
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Bytes the device adds to each segment.
    pub fn pad(&self) -> u64 {
        self.pad
    }

    /// Whether a shared block of `size` bytes is one of these.
    pub fn is_block_size(&self, size: u64) -> bool {
        (0..8).any(|k| self.block_after(k) == size)
    }

    /// The size of the block made after `blocks` shared ones.
    fn block_after(&self, blocks: usize) -> u64 {
        (self.min_block << blocks.min(7)).min(self.max_block)
    }
}

/// Where a device allocator puts a segment ([`DeviceBlocks::goes_to`]).
#[cfg(not(target_arch = "wasm32"))]
enum Goes {
    /// Memory of its own: larger than the next shared block.
    Own,
    /// Free range `.1` of block `.0`.
    Range(usize, usize),
    /// A new shared block of this size.
    NewShared(u64),
}

#[cfg(not(target_arch = "wasm32"))]
#[derive(Debug, Clone)]
struct Block {
    size: u64,
    /// Memory of one segment's own: freed with it.
    own: bool,
    used: u64,
    /// Free ranges, (offset, size), by offset.
    free: Vec<(u64, u64)>,
}

#[cfg(not(target_arch = "wasm32"))]
impl Block {
    /// The best-fit free range for `size`: its index. (Offsets are not
    /// aligned: the pool's segments are whole alignment units, and the
    /// H100's replays matched this model with alignments of 1 to 64 KiB
    /// alike.)
    fn best_fit(&self, size: u64) -> Option<usize> {
        if self.own || size > self.size - self.used {
            return None;
        }
        let mut best: Option<usize> = None;
        for (i, &(_, s)) in self.free.iter().enumerate() {
            if s >= size && best.is_none_or(|j| s < self.free[j].1) {
                best = Some(i);
            }
        }
        best
    }

    /// Takes `size` bytes from the start of free range `i`.
    fn take(&mut self, i: usize, size: u64) -> u64 {
        let (offset, s) = self.free[i];
        if s == size {
            self.free.remove(i);
        } else {
            self.free[i] = (offset + size, s - size);
        }
        self.used += size;
        offset
    }

    fn give_back(&mut self, offset: u64, size: u64) {
        self.used -= size;
        let i = self.free.partition_point(|&(o, _)| o < offset);
        self.free.insert(i, (offset, size));
        if i + 1 < self.free.len() && offset + size == self.free[i + 1].0 {
            self.free[i].1 += self.free[i + 1].1;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == offset {
            self.free[i - 1].1 += self.free[i].1;
            self.free.remove(i);
        }
    }
}

/// A model of one memory type of a sub-allocating device allocator, fed
/// the pool's own segments: where the device puts each, and what it holds.
/// It does not see what else the application allocates there, so it is a
/// forecast, not a record: a wrong one costs memory, never bytes.
///
/// ```
/// use vrampool::{DeviceBlocks, Suballocation};
/// let mib = 1u64 << 20;
/// let mut d = DeviceBlocks::new(Suballocation::new(128 * mib, 256 * mib, 0));
/// assert_eq!(d.fit(100 * mib), 128 * mib); // a new 128 MiB block
/// d.place(0, 100 * mib);
/// assert_eq!(d.fit(20 * mib), 28 * mib); // the 28 MiB left in it
/// assert_eq!(d.fit(150 * mib), 256 * mib); // a new 256 MiB block
/// assert_eq!(d.fit(300 * mib), 300 * mib); // memory of its own
/// d.remove(0);
/// assert_eq!(d.held(), 128 * mib); // the last block stays
/// ```
#[cfg(not(target_arch = "wasm32"))]
#[derive(Debug, Clone)]
pub struct DeviceBlocks {
    sizes: Suballocation,
    blocks: Vec<Option<Block>>,
    /// Shared blocks held.
    shared: usize,
    /// Where each segment went, by the caller's segment index: (block, offset, size).
    placed: Vec<Option<(u32, u64, u64)>>,
    held: u64,
    peak: u64,
    created: u64,
    freed: u64,
}

#[cfg(not(target_arch = "wasm32"))]
impl DeviceBlocks {
    /// A device allocator holding none of the pool's segments yet: no
    /// block, or with [`Suballocation::head`] its first block, holding the
    /// device's own bytes (not counted in [`DeviceBlocks::bytes_created`]).
    pub fn new(sizes: Suballocation) -> Self {
        let mut d = DeviceBlocks {
            sizes,
            blocks: Vec::new(),
            shared: 0,
            placed: Vec::new(),
            held: 0,
            peak: 0,
            created: 0,
            freed: 0,
        };
        if sizes.head > 0 {
            let mut first = Block {
                size: sizes.min_block,
                own: false,
                used: 0,
                free: vec![(0, sizes.min_block)],
            };
            first.take(0, sizes.head);
            d.blocks.push(Some(first));
            d.shared = 1;
            d.held = sizes.min_block;
            d.peak = d.held;
        }
        d
    }

    /// What it models.
    pub fn sizes(&self) -> Suballocation {
        self.sizes
    }

    /// Bytes of device memory the blocks hold.
    pub fn held(&self) -> u64 {
        self.held
    }

    /// The most bytes the blocks held at once.
    pub fn peak_held(&self) -> u64 {
        self.peak
    }

    /// Bytes of device memory allocated for blocks so far: what creating
    /// memory costs is counted in these, not in the segments' bytes.
    pub fn bytes_created(&self) -> u64 {
        self.created
    }

    /// Bytes of device memory freed with emptied blocks so far.
    pub fn bytes_freed(&self) -> u64 {
        self.freed
    }

    /// Where a segment of `size` bytes would go: (block, free range), or
    /// `None` for a new block.
    fn find(&self, size: u64) -> Option<(usize, usize)> {
        // Newest block first; the first with room takes it.
        self.blocks.iter().enumerate().rev().find_map(|(b, block)| {
            block
                .as_ref()
                .and_then(|block| block.best_fit(size))
                .map(|i| (b, i))
        })
    }

    /// The bytes the device would set aside for a new segment of `size`: the
    /// free range it would be placed in, a new shared block, or `size` itself
    /// when it gets memory of its own (less the [pad](Suballocation::pad)
    /// the device adds to the segment).
    pub fn fit(&self, size: u64) -> u64 {
        self.fit_padded(size, self.sizes.pad)
    }

    fn fit_padded(&self, size: u64, pad: u64) -> u64 {
        match self.goes_to(size + pad) {
            Goes::Own => size,
            Goes::Range(b, i) => self.blocks[b]
                .as_ref()
                .map_or(size, |block| block.free[i].1 - pad),
            Goes::NewShared(next) => next - pad,
        }
    }

    /// Where the device puts `size` bytes (a segment with its pad): the one
    /// decision [`DeviceBlocks::fit`] forecasts and [`DeviceBlocks::place`]
    /// records.
    fn goes_to(&self, size: u64) -> Goes {
        let next = self.sizes.block_after(self.shared);
        if size > next {
            return Goes::Own;
        }
        match self.find(size) {
            Some((b, i)) => Goes::Range(b, i),
            None => Goes::NewShared(next),
        }
    }

    /// Records segment `segment` (the caller's index for it, reused once
    /// removed) of `size` bytes, placed as the device would.
    pub fn place(&mut self, segment: u32, size: u64) {
        self.place_padded(segment, size, self.sizes.pad)
    }

    fn place_padded(&mut self, segment: u32, size: u64, pad: u64) {
        let size = size + pad;
        let (b, i) = match self.goes_to(size) {
            Goes::Range(b, i) => (b, i),
            goes => {
                let (own, block_size) = match goes {
                    Goes::NewShared(next) => (false, next),
                    _ => (true, size),
                };
                let block = Block {
                    size: block_size,
                    own,
                    used: 0,
                    free: vec![(0, block_size)],
                };
                if !own {
                    self.shared += 1;
                }
                self.held += block_size;
                self.peak = self.peak.max(self.held);
                self.created += block_size;
                // gpu-allocator gives a segment's own memory the first empty
                // slot, and a new shared block the last (its search for room
                // runs newest first and notes the empty slots it passes).
                let empty = if own {
                    self.blocks.iter().position(Option::is_none)
                } else {
                    self.blocks.iter().rposition(Option::is_none)
                };
                let b = match empty {
                    Some(b) => {
                        self.blocks[b] = Some(block);
                        b
                    }
                    None => {
                        self.blocks.push(Some(block));
                        self.blocks.len() - 1
                    }
                };
                (b, 0)
            }
        };
        let offset = self.blocks[b]
            .as_mut()
            .map_or(0, |block| block.take(i, size));
        let slot = segment as usize;
        if self.placed.len() <= slot {
            self.placed.resize(slot + 1, None);
        }
        self.placed[slot] = Some((b as u32, offset, size));
    }

    /// Forgets segment `segment`: its range is free again, and its block is
    /// freed if that left it empty and it is its segment's own or not the
    /// last shared one. Nothing if it was never placed.
    pub fn remove(&mut self, segment: u32) {
        let Some((b, offset, size)) = self.placed.get_mut(segment as usize).and_then(Option::take)
        else {
            return;
        };
        let Some(block) = self.blocks[b as usize].as_mut() else {
            return;
        };
        block.give_back(offset, size);
        if block.used == 0 && (block.own || self.shared > 1) {
            if !block.own {
                self.shared -= 1;
            }
            self.held -= block.size;
            self.freed += block.size;
            self.blocks[b as usize] = None;
        }
    }
}

/// The engine's models, one per kind of memory its segments went to
/// ([`Suballocation::memory`]; the first segment's block sizes make it).
/// Not generic, so the engine's backends share one copy of its code.
#[cfg(not(target_arch = "wasm32"))]
#[derive(Debug, Clone, Default)]
pub(crate) struct DeviceModels(Vec<DeviceBlocks>);

#[cfg(not(target_arch = "wasm32"))]
impl DeviceModels {
    /// Where the model of `sizes`' memory is, if a segment went there.
    fn at(&self, sizes: Suballocation) -> Option<usize> {
        self.0.iter().position(|d| d.sizes.memory == sizes.memory)
    }

    /// [`DeviceBlocks::fit`] in the model of `sizes`' memory (an empty one if
    /// no segment went there yet), with `sizes`' pad.
    pub(crate) fn fit(&self, sizes: Suballocation, size: u64) -> u64 {
        match self.at(sizes) {
            Some(at) => self.0[at].fit_padded(size, sizes.pad),
            None => DeviceBlocks::new(sizes).fit_padded(size, sizes.pad),
        }
    }

    /// [`DeviceBlocks::place`] in the model of `sizes`' memory, with `sizes`' pad.
    pub(crate) fn place(&mut self, sizes: Suballocation, segment: u32, size: u64) {
        let at = match self.at(sizes) {
            Some(at) => at,
            None => {
                self.0.push(DeviceBlocks::new(sizes));
                self.0.len() - 1
            }
        };
        self.0[at].place_padded(segment, size, sizes.pad);
    }

    /// [`DeviceBlocks::remove`] in the model of `sizes`' memory.
    pub(crate) fn remove(&mut self, sizes: Suballocation, segment: u32) {
        if let Some(at) = self.at(sizes) {
            self.0[at].remove(segment);
        }
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    fn performance() -> DeviceBlocks {
        DeviceBlocks::new(Suballocation::new(128 * MIB, 256 * MIB, 0))
    }

    #[test]
    fn blocks_double_from_the_first_up_to_the_largest() {
        let mut d = performance();
        d.place(0, 100 * MIB);
        assert_eq!(d.held(), 128 * MIB);
        d.place(1, 100 * MIB);
        assert_eq!(d.held(), 384 * MIB, "the second block is 256 MiB");
        d.place(2, 200 * MIB);
        assert_eq!(d.held(), 640 * MIB, "so is the third: the largest");
    }

    #[test]
    fn the_newest_block_with_room_takes_a_segment_at_its_best_fit() {
        let mut d = performance();
        d.place(0, 120 * MIB); // block 0: 8 MiB left
        d.place(1, 100 * MIB); // block 1 (256): 156 left
        d.place(2, 50 * MIB); // block 1: 106 left
        d.remove(1); // block 1: free 0..100 and 150..256
        // 8 MiB fit in block 0 too, but block 1 is newer: its best fit is
        // the 100 MiB range.
        assert_eq!(d.fit(8 * MIB), 100 * MIB);
        assert_eq!(d.fit(101 * MIB), 106 * MIB);
        d.place(3, 101 * MIB);
        assert_eq!(d.held(), 384 * MIB, "no new block");
        assert_eq!(d.fit(101 * MIB), 256 * MIB, "nothing left holds it");
    }

    #[test]
    fn a_segment_above_the_next_block_has_memory_of_its_own() {
        let mut d = performance();
        // The first block would be 128 MiB: 200 MiB is its own memory.
        assert_eq!(d.fit(200 * MIB), 200 * MIB);
        d.place(0, 200 * MIB);
        assert_eq!(d.held(), 200 * MIB);
        d.remove(0);
        assert_eq!(d.held(), 0, "own memory goes with its segment");
    }

    #[test]
    fn an_emptied_block_is_freed_but_the_last_shared_one() {
        let mut d = performance();
        d.place(0, 100 * MIB);
        d.place(1, 200 * MIB);
        d.remove(1);
        assert_eq!(d.held(), 128 * MIB, "block 1 emptied and freed");
        d.remove(0);
        assert_eq!(d.held(), 128 * MIB, "the last shared block stays");
        // Freed ranges join: the block holds its whole size again.
        assert_eq!(d.fit(128 * MIB), 128 * MIB);
        d.place(2, 128 * MIB);
        assert_eq!(d.held(), 128 * MIB);
    }

    #[test]
    fn the_devices_own_head_keeps_the_first_block_from_a_segment_of_its_size() {
        // wgpu's zero buffer sits at the start of the first block: a 128 MiB
        // segment no longer fits there and goes to a new 256 MiB block.
        let sizes = Suballocation::new(128 * MIB, 256 * MIB, 0).with_head(MIB / 2);
        let mut d = DeviceBlocks::new(sizes);
        assert_eq!(d.held(), 128 * MIB);
        assert_eq!(
            d.fit(100 * MIB),
            128 * MIB - MIB / 2,
            "the rest of the first block"
        );
        assert_eq!(d.fit(128 * MIB), 256 * MIB);
        d.place(0, 128 * MIB);
        assert_eq!((d.held(), d.bytes_created()), (384 * MIB, 256 * MIB));
        d.remove(0);
        assert_eq!(d.held(), 128 * MIB, "the first block stays, with the head");
    }

    #[test]
    fn a_new_shared_block_takes_the_last_empty_slot_as_gpu_allocator_does() {
        // Blocks 0 (128), 1, 2, 3 (256 each); 1 and 3 emptied and freed.
        // gpu-allocator's new shared block goes to slot 3, the newest, so the
        // next small segment lands there, not in slot 2.
        let mut d = performance();
        for (i, size) in [100, 200, 200, 200].into_iter().enumerate() {
            d.place(i as u32, size * MIB);
        }
        d.remove(1);
        d.remove(3);
        d.place(4, 200 * MIB); // a new block, in slot 3
        d.place(5, 40 * MIB); // slot 3 is searched first: 56 MiB left there
        d.remove(2); // slot 2 empties and goes
        assert_eq!(d.held(), (128 + 256) * MIB);
        assert_eq!(d.fit(16 * MIB), 16 * MIB, "slot 3's last 16 MiB");
    }

    #[test]
    fn a_padded_segment_is_fitted_to_what_it_leaves_room_for() {
        let sizes = Suballocation::new(128 * MIB, 256 * MIB, 0).with_pad(64 << 10);
        let mut d = DeviceBlocks::new(sizes);
        d.place(0, 100 * MIB);
        // The first block holds 100 MiB + 64 KiB: 28 MiB less 64 KiB is left,
        // and a segment there takes 64 KiB more than its size.
        assert_eq!(d.fit(20 * MIB), 28 * MIB - 128 * 1024);
        // A whole new block, less the pad: the segment stays in a shared block.
        assert_eq!(d.fit(150 * MIB), 256 * MIB - 64 * 1024);
        d.place(1, 256 * MIB - 64 * 1024);
        assert_eq!(d.held(), 384 * MIB);
    }

    #[test]
    fn a_segment_never_placed_is_removed_as_nothing() {
        let mut d = performance();
        d.remove(7);
        d.place(0, MIB);
        d.remove(0);
        d.remove(0);
        assert_eq!(d.held(), 128 * MIB);
    }
}
