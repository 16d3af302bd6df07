//! Segments fitted to the blocks of the device's own allocator
//! ([`Config::fit_device_blocks`](crate::Config::fit_device_blocks)): the
//! engine keeps a model of where the device put each segment
//! (`DeviceBlocks`, one per kind of memory that
//! [`Backend::suballocation`] names) and sizes a new segment above a quarter
//! of the largest block to what the device sets aside for it.

use crate::backend::Backend;

use super::Engine;

#[cfg(not(target_arch = "wasm32"))]
impl<B: Backend> Engine<B> {
    /// How the device's allocator holds the segments of `pool`, where they
    /// are fitted to its blocks ([`Config::fit_device_blocks`]; not under a
    /// budget).
    fn fitting(&self, pool: u16) -> Option<crate::Suballocation> {
        if !self.config.fit_device_blocks || self.under_budget() {
            return None;
        }
        self.backend.suballocation(self.pools[pool as usize].usage)
    }

    /// What the device sets aside for a new segment of `size` bytes held as
    /// `sizes` says, in whole alignment units.
    fn device_fit(&self, sizes: crate::Suballocation, size: u64) -> u64 {
        self.device.fit(sizes, size) & !(self.config.alignment - 1)
    }

    /// A new segment of `size` bytes in `pool` fitted to the device's
    /// blocks: if it is above a quarter of the largest block and at most
    /// one, the bytes the device would set aside for it.
    pub(super) fn fitted(&self, pool: u16, size: u64) -> u64 {
        match self.fitting(pool) {
            Some(sizes) if fits_a_block(sizes, size) => self.device_fit(sizes, size).max(size),
            _ => size,
        }
    }

    /// The segment size the soft headroom or a ceiling trims a new segment
    /// to (`trimmed`, at least the request's `rounded`), fitted to the
    /// device's blocks: where `trimmed` is above a quarter of the largest
    /// block and at most one, the range the device would give the request
    /// alone, if that is no larger.
    pub(super) fn fitted_trim(&self, pool: u16, trimmed: u64, rounded: u64) -> u64 {
        match self.fitting(pool) {
            Some(sizes) if fits_a_block(sizes, trimmed) => {
                let fit = self.device_fit(sizes, rounded);
                if fit <= trimmed {
                    fit.max(rounded)
                } else {
                    trimmed
                }
            }
            _ => trimmed,
        }
    }

    /// Tells the model of the device's blocks of segment `index`, new in
    /// `pool` with `size` bytes.
    pub(super) fn device_place(&mut self, pool: u16, index: u32, size: u64) {
        if let Some(sizes) = self.backend.suballocation(self.pools[pool as usize].usage) {
            self.device.place(sizes, index, size);
        }
    }

    /// Tells the model of the device's blocks that segment `index` of `pool`
    /// is gone.
    pub(super) fn device_remove(&mut self, pool: u16, index: u32) {
        if let Some(sizes) = self.backend.suballocation(self.pools[pool as usize].usage) {
            self.device.remove(sizes, index);
        }
    }
}

/// Whether a segment of `size` is fitted to blocks of `sizes`: above a
/// quarter of the largest block and at most one.
#[cfg(not(target_arch = "wasm32"))]
fn fits_a_block(sizes: crate::Suballocation, size: u64) -> bool {
    size > sizes.max_block() / 4 && size <= sizes.max_block()
}

/// wasm32: a browser's WebGPU tells nothing of its allocator, and the page's
/// wasm has a size target: segments are sized as without a model.
#[cfg(target_arch = "wasm32")]
impl<B: Backend> Engine<B> {
    pub(super) fn fitted(&self, _: u16, size: u64) -> u64 {
        size
    }

    pub(super) fn fitted_trim(&self, _: u16, trimmed: u64, _: u64) -> u64 {
        trimmed
    }

    pub(super) fn device_place(&mut self, _: u16, _: u32, _: u64) {}

    pub(super) fn device_remove(&mut self, _: u16, _: u32) {}
}
