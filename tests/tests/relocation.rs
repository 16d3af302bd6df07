//! Relocatable blocks on a real device (lavapipe, and GL with
//! `WGPU_BACKEND=gl`): an engine over `WgpuBackend::with_moves` copies the
//! blocks it moves with `copy_buffer_to_buffer` on the queue, and every
//! owner reads back what it wrote — through the GPU, at the place the
//! engine says — after moves that made room for requests no free block held.

use std::collections::HashMap;

use vrampool::{BlockId, Config, Engine, Request, WgpuBackend};
use vrampool_tests::{Rng, device, read_range};
use wgpu::BufferUsages as U;

const MIB: u64 = 1 << 20;

/// A block's owner's pattern: its byte, repeated.
struct Owner {
    fill: u8,
    size: u64,
}

struct Device {
    device: wgpu::Device,
    queue: wgpu::Queue,
    e: Engine<WgpuBackend>,
    live: HashMap<BlockId, Owner>,
    next: u8,
}

impl Device {
    fn new() -> Device {
        let (device, queue, _) = device();
        let backend = WgpuBackend::new(&device, None).with_moves(&queue);
        let e = Engine::new(backend, Config::default()).unwrap();
        Device {
            device,
            queue,
            e,
            live: HashMap::new(),
            next: 1,
        }
    }

    /// Allocates a relocatable storage block and writes its owner's bytes
    /// with `queue.write_buffer`.
    fn allocate(&mut self, size: u64) -> BlockId {
        let a = self
            .e
            .allocate(Request {
                relocatable: true,
                ..Request::new(size, U::STORAGE.bits())
            })
            .unwrap();
        self.e.take_moves();
        let fill = self.next;
        self.next = self.next.wrapping_add(1).max(1);
        let buffer = self.e.segment_payload(a.segment).unwrap();
        self.queue
            .write_buffer(buffer, a.offset, &vec![fill; size as usize]);
        self.live.insert(a.id, Owner { fill, size });
        a.id
    }

    fn free(&mut self, id: BlockId) {
        self.live.remove(&id);
        self.e.free(id).unwrap();
    }

    /// Reads every live block back through the GPU at its place now.
    fn verify(&self) {
        for (&id, o) in &self.live {
            let (seg, offset) = self.e.locate(id).unwrap();
            let buffer = self.e.segment_payload(seg).unwrap();
            let bytes = read_range(&self.device, &self.queue, buffer, offset, o.size);
            let wrong = bytes.iter().filter(|&&b| b != o.fill).count();
            assert_eq!(
                wrong, 0,
                "block {id}: {wrong} of {} bytes not its owner's",
                o.size
            );
        }
        self.e.check_invariants().unwrap();
    }
}

#[test]
fn a_moved_block_keeps_its_bytes_on_the_device() {
    let mut d = Device::new();
    // Two 24 MiB segments, 12 MiB live at one end of each.
    let (x, y) = (d.allocate(24 * MIB), d.allocate(24 * MIB));
    d.free(x);
    let (p, _q) = (d.allocate(12 * MIB), d.allocate(12 * MIB));
    d.free(y);
    let (_r, s) = (d.allocate(12 * MIB), d.allocate(12 * MIB));
    d.free(p);
    d.free(s);
    let segments = d.e.stats().counters.device_allocs;
    // 20 MiB fit in neither hole: a 12 MiB block moves over instead.
    d.allocate(20 * MIB);
    let c = d.e.stats().counters;
    assert_eq!(c.device_allocs, segments, "no new segment");
    assert_eq!((c.blocks_moved, c.bytes_moved), (1, 12 * MIB));
    d.verify();
}

#[test]
fn random_moves_keep_every_owner_s_bytes_on_the_device() {
    let mut d = Device::new();
    let mut rng = Rng(0x51ab_1e5e_ed00_0001);
    let mut ids: Vec<BlockId> = Vec::new();
    for step in 0..600 {
        if ids.is_empty() || rng.below(100) < 55 {
            let size = match rng.below(10) {
                0..=4 => 256 + rng.below(256 << 10),
                5..=8 => (256 << 10) + rng.below(4 * MIB),
                _ => 4 * MIB + rng.below(12 * MIB),
            } & !3;
            ids.push(d.allocate(size));
        } else {
            let id = ids.swap_remove(rng.below(ids.len() as u64) as usize);
            d.free(id);
        }
        if step % 100 == 99 {
            d.verify();
        }
    }
    d.verify();
    assert!(
        d.e.stats().counters.blocks_moved > 0,
        "the sequence moved blocks"
    );
}
