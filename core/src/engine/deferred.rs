//! Frees that wait for a mark: a block whose owner is done while commands
//! recorded before the free may still run is *pending* — neither reused nor
//! coalesced — until the caller reclaims a mark taken after the free (the
//! wgpu binding does when it learns of a submit).

use crate::backend::Backend;
use crate::error::Result;
use crate::types::BlockId;

use super::Engine;
use super::store::{Block, BlockState, FreeRow, log_free};

/// A block freed with [`Engine::defer_free`], waiting for its mark.
#[derive(Debug, Clone, Copy)]
pub(super) struct Deferred {
    pub(super) mark: u64,
    pub(super) block: u32,
    pub(super) generation: u32,
    /// Its free's row, if a recording was under way (see `log_free`).
    pub(super) row: Option<FreeRow>,
}

impl Deferred {
    /// Whether this free still waits: its block is pending, not released
    /// with its segment.
    pub(super) fn waits(&self, blocks: &[Block]) -> bool {
        let block = &blocks[self.block as usize];
        block.state == BlockState::Pending && block.generation == self.generation
    }
}

impl<B: Backend> Engine<B> {
    /// Returns a block whose bytes commands recorded but not yet submitted
    /// may still use: it is *pending* — counted in `pending_bytes`, neither
    /// reused nor coalesced — until [`Engine::reclaim_deferred`] is called
    /// with a mark taken after this call. A segment holding only free and
    /// pending blocks may still be released; the backend is then told to
    /// [`abandon`](Backend::abandon_segment) it rather than destroy it.
    ///
    /// ```
    /// use vrampool::{Config, Engine, Request, SimulatedDevice};
    /// let mut e = Engine::new(SimulatedDevice::new(1 << 30), Config::default())?;
    /// let a = e.allocate(Request::new(4096, 0))?;
    /// e.defer_free(a.id)?;
    /// let b = e.allocate(Request::new(4096, 0))?; // not a's bytes
    /// assert_ne!(b.offset, a.offset);
    /// assert_eq!(e.stats().total.pending_bytes.current, 4096);
    /// let mark = e.defer_mark(); // ... the work using `a` is submitted ...
    /// assert_eq!(e.reclaim_deferred(mark), 4096);
    /// assert_eq!(e.stats().total.pending_bytes.current, 0);
    /// # Ok::<(), vrampool::Error>(())
    /// ```
    pub fn defer_free(&mut self, id: BlockId) -> Result<()> {
        let mark = self.defer_mark;
        self.defer_free_at(id, mark)
    }

    /// [`Engine::defer_free`] with the caller's own mark: the block waits for
    /// a [`Engine::reclaim_deferred`] of `mark` or later. The wgpu binding
    /// counts its submits itself (so that learning of one takes no lock), and
    /// blocks its handle cache gives back late keep the mark of their drop,
    /// which may be older than the newest deferred block's.
    pub(crate) fn defer_free_at(&mut self, id: BlockId, mark: u64) -> Result<()> {
        let (b, row) = self.take_live(id)?;
        let block = &mut self.blocks[b as usize];
        block.state = BlockState::Pending;
        let (segment, size, generation) = (block.segment, block.size, block.generation);
        let seg = self.segments[segment as usize].as_mut().unwrap();
        seg.pending += size;
        let pool = seg.pool as usize;
        for st in [&mut self.total, &mut self.pools[pool].stats] {
            st.pending_bytes.add(size);
            st.pending_blocks.add(1);
        }
        // Oldest mark first; a late block's place is near the back.
        let at = self.deferred.len()
            - self
                .deferred
                .iter()
                .rev()
                .take_while(|d| d.mark > mark)
                .count();
        self.deferred.insert(
            at,
            Deferred {
                mark,
                block: b,
                generation,
                row,
            },
        );
        Ok(())
    }

    /// Whether any block waits for a mark.
    #[cfg(feature = "wgpu")]
    pub(crate) fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// A mark covering every block deferred so far: pass it to
    /// [`Engine::reclaim_deferred`] once the work recorded before those frees
    /// has been submitted. Blocks deferred after this call wait for a later mark.
    pub fn defer_mark(&mut self) -> u64 {
        self.defer_mark += 1;
        self.defer_mark - 1
    }

    /// Makes every block deferred up to `mark` free for reuse (coalescing it
    /// with free neighbours); returns their bytes. Blocks whose segment was
    /// released meanwhile are gone already.
    pub fn reclaim_deferred(&mut self, mark: u64) -> u64 {
        let mut bytes = 0;
        while let Some(&d) = self.deferred.front() {
            if d.mark > mark {
                break;
            }
            self.deferred.pop_front();
            log_free(&mut self.recorder, d.row);
            if !d.waits(&self.blocks) {
                // Not reached: a released segment takes its blocks' entries
                // out of the queue (forget_released_deferred).
                continue;
            }
            let block = &self.blocks[d.block as usize];
            let (segment, size) = (block.segment, block.size);
            let seg = self.segments[segment as usize].as_mut().unwrap();
            seg.pending -= size;
            let pool = seg.pool as usize;
            for st in [&mut self.total, &mut self.pools[pool].stats] {
                st.pending_bytes.sub(size);
                st.pending_blocks.sub(1);
            }
            self.make_free(d.block);
            bytes += size;
        }
        if bytes > 0 {
            self.allocated_since_reclaim = 0;
        }
        bytes
    }

    /// Forgets the deferred frees of blocks released with their segment (a
    /// segment the limits, the headroom or `empty_cache` abandoned): a
    /// caller that never reclaims would otherwise keep them all. Their
    /// frees are logged now, as the memory goes.
    pub(super) fn forget_released_deferred(&mut self) {
        let (blocks, recorder) = (&self.blocks, &mut self.recorder);
        self.deferred.retain(|d| {
            let waits = d.waits(blocks);
            if !waits {
                log_free(recorder, d.row);
            }
            waits
        });
    }

    /// Bytes of pending blocks (see [`Engine::defer_free`]).
    pub fn pending_bytes(&self) -> u64 {
        self.total.pending_bytes.current
    }
}
