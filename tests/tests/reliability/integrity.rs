//! GPU-side integrity over a long random sequence: every block still live at
//! the next check after it is handed out is tagged on the GPU with a pattern
//! of its own there and verified at every check while it lives (a block
//! handed out and freed between two checks is tagged at none), so a block
//! that shares a byte with another — or that another block's zeroing clears
//! — is caught; every zeroed block handed out from
//! reused memory and still live at the next check must read all zeros then.
//! Every other thousand operations is a loop that repeats a few sizes, frees
//! what it tagged last and checks at each of its submits, so the blocks the
//! front cache hands on (and zeroes) are checked too.

use vrampool::{Access, AllocDesc, Config, PoolBuffer};
use vrampool_tests::{Handed, Range, Rng, Tagger};

use super::{env_count, pool_with};

/// One live block and its tag.
struct Tagged {
    block: PoolBuffer,
    tag: u32,
    /// Asked for zeroed and served from reused memory: must read all zeros.
    zeroed_reuse: bool,
}

/// How many of the last blocks handed out a loop frees from.
const LOOP_RECENT: usize = 16;

/// A request size: most under 16 KiB, some up to 256 KiB, a few up to
/// `max_size`.
fn random_size(rng: &mut Rng, max_size: u64) -> u64 {
    match rng.below(100) {
        0..=69 => 1 + rng.below(16 << 10),
        70..=97 => (16 << 10) + rng.below(256 << 10),
        _ => (256 << 10) + rng.below(max_size - (256 << 10)),
    }
}

/// Runs `ops` random operations and a GPU check of every live block every
/// `every` of them (in loops, one of the new blocks every ten too); live
/// bytes stay under `live_cap`. Returns (checks, zeroed reuses checked).
fn run(config: Config, ops: u64, every: u64, live_cap: u64, max_size: u64) -> (u64, u64) {
    let pool = pool_with(config);
    let tagger = Tagger::new(pool.device(), pool.queue());
    let mut rng = Rng(0x1d7e_6a1e_5eed ^ ops);
    let mut live: Vec<Tagged> = Vec::new();
    let mut fresh: Vec<Tagged> = Vec::new(); // handed out since the last check
    let palette: Vec<u64> = (0..8).map(|_| random_size(&mut rng, max_size)).collect();
    let mut handed = Handed::default();
    let (mut live_bytes, mut next_tag, mut checks, mut zero_checked) = (0u64, 1u32, 0, 0);
    let mut loop_zero_checked = 0u64;
    for op in 1..=ops {
        let looping = (op / 1000) % 2 == 1;
        let r = rng.below(1000);
        if r == 0 {
            pool.empty_cache();
        } else if r < 520 && live_bytes < live_cap || live.len() + fresh.len() < 2 {
            // Every other thousand operations is a loop: its requests
            // repeat a few sizes, as a loop's tensors do, and it submits
            // every ten operations, so the front cache hands blocks on.
            let size = if looping {
                palette[rng.below(palette.len() as u64) as usize]
            } else {
                random_size(&mut rng, max_size)
            };
            let zero = rng.below(5) == 0;
            // Every placement: packed read-write and read-only blocks, and
            // blocks with a buffer of their own.
            let access = [
                Access::ReadWrite,
                Access::ReadWrite,
                Access::ReadOnly,
                Access::Any,
            ][rng.below(4) as usize];
            let mut desc = AllocDesc::storage(size).access(access).label("tagged");
            if zero {
                desc = desc.zeroed();
            }
            let block = pool.alloc(desc).unwrap();
            live_bytes += block.size();
            // Served from reused memory: some byte of it was handed out
            // before (told by place, not by stats: see `Handed`).
            let reused = handed.hand_out(&block);
            fresh.push(Tagged {
                block,
                tag: next_tag,
                zeroed_reuse: zero && reused,
            });
            next_tag += 1;
        } else {
            // Free a random block, old or new; in a loop, one of the last
            // it handed out and tagged (`live` grows at its end), so the
            // front cache hands on blocks whose bytes are a checked owner's.
            let i = if looping && !live.is_empty() {
                let recent = live.len().min(LOOP_RECENT);
                live.len() - 1 - rng.below(recent as u64) as usize
            } else {
                rng.below((live.len() + fresh.len()) as u64) as usize
            };
            let t = if i < live.len() {
                live.swap_remove(i)
            } else {
                fresh.swap_remove(i - live.len())
            };
            live_bytes -= t.block.size();
        }
        if op % if looping { 10 } else { 100 } == 0 {
            // A frame: the only commands are the checks, submitted and waited
            // for, so what was dropped may be reused.
            pool.submitted();
        }
        // A check every `every` operations verifies every live block; in a
        // loop one at each submit also tags the blocks handed out since the
        // last (verifying those alone), so a block the front cache hands on
        // is checked before the loop frees it again.
        let full = op % every == 0 || op == ops;
        if full || looping && op % 10 == 0 {
            let zero_ranges: Vec<Range> = fresh
                .iter()
                .filter(|t| t.zeroed_reuse)
                .map(|t| Range::from(&*t.block))
                .collect();
            let write: Vec<_> = fresh
                .iter()
                .map(|t| (Range::from(&*t.block), t.tag))
                .collect();
            let verify: Vec<_> = live
                .iter()
                .filter(|_| full)
                .chain(&fresh)
                .map(|t| (Range::from(&*t.block), t.tag))
                .collect();
            let (corrupt, nonzero) = tagger.step(&zero_ranges, &write, &verify);
            assert_eq!(corrupt, 0, "corrupted tag words after op {op}");
            assert_eq!(nonzero, 0, "a zeroed block held old bytes after op {op}");
            zero_checked += zero_ranges.len() as u64;
            if !full {
                loop_zero_checked += zero_ranges.len() as u64;
            }
            drop((zero_ranges, write, verify));
            live.append(&mut fresh);
            checks += 1;
        }
    }
    let s = pool.stats();
    assert!(
        s.counters.cache_hits > ops / 4,
        "the sequence reused memory: {:?}",
        s.counters
    );
    // The front cache served some of them, and the loops' checks read
    // zeroed blocks handed on (a run of a few thousand operations has too
    // few loops to say).
    if ops >= 10_000 {
        assert!(
            s.counters.front_hits > ops / 1000,
            "the front cache served blocks: {:?}",
            s.counters
        );
        assert!(
            loop_zero_checked > ops / 10_000,
            "{loop_zero_checked} zeroed reuses read back inside loops"
        );
    }
    pool.check_invariants().unwrap();
    drop(live);
    assert_eq!(pool.stats().total.allocated_bytes.current, 0);
    eprintln!(
        "{ops} ops: {checks} GPU checks, {} blocks tagged, {zero_checked} zeroed reuses read back ({loop_zero_checked} inside loops), {} cache hits ({} from the front cache), peak reserved {} MiB",
        next_tag - 1,
        s.counters.cache_hits,
        s.counters.front_hits,
        s.total.reserved_bytes.peak >> 20
    );
    (checks, zero_checked)
}

#[test]
fn a_long_random_sequence_never_corrupts_a_tag() {
    // VRAMPOOL_INTEGRITY_OPS / _LIVE_MIB / _MAX_MIB run it longer and larger on a real GPU.
    let ops = env_count("VRAMPOOL_INTEGRITY_OPS", 100_000);
    let live_cap = env_count("VRAMPOOL_INTEGRITY_LIVE_MIB", 48) << 20;
    let max_size = env_count("VRAMPOOL_INTEGRITY_MAX_MIB", 4) << 20;
    let (_, zeroed) = run(Config::default(), ops, 1000, live_cap, max_size);
    assert!(zeroed > ops / 50, "{zeroed} zeroed reuses checked");
}

#[test]
fn the_pytorch_preset_never_corrupts_a_tag_either() {
    let ops = env_count("VRAMPOOL_INTEGRITY_OPS", 100_000) / 4;
    let (_, zeroed) = run(Config::pytorch(), ops, 1000, 48 << 20, 4 << 20);
    assert!(zeroed > ops / 50, "{zeroed} zeroed reuses checked");
}

#[test]
fn the_step_check_catches_overlap_and_stale_bytes() {
    // Negative control for the check above, on ranges of one raw buffer.
    let (device, queue, _) = vrampool_tests::device();
    let tagger = Tagger::new(&device, &queue);
    let buf = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 3 * 4096,
        usage: wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    let at = |offset, size| Range {
        buffer: &buf,
        offset,
        size,
    };
    let (a, b, c) = (at(0, 4096), at(4096, 4096), at(2048, 4096));
    // Step 1: a and b, disjoint: clean; a holds its tag now.
    assert_eq!(
        tagger.step(&[], &[(a, 1), (b, 2)], &[(a, 1), (b, 2)]),
        (0, 0)
    );
    // Step 2: c is handed out over half of a and half of b: both are caught.
    let (corrupt, _) = tagger.step(&[], &[(c, 3)], &[(a, 1), (b, 2), (c, 3)]);
    assert_eq!(corrupt, 2 * 512, "half of a's and half of b's words");
    // A "zeroed" range that still holds tags is caught.
    assert_eq!(tagger.step(&[a], &[], &[]).1, 1024);
}
