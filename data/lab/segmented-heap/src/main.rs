//! A lab, not the pool: segmented heaps without the engine's rules, against
//! the PyTorch preset, on every trace of data/traces (see data/lab/README.md).
//! Each segment is one buffer; blocks never span two. Modes: `grow=F`
//! (a new segment of F × the bytes reserved, 0: exactly the request),
//! `small_max=N` (requests up to N bytes in fixed small segments of
//! `small_seg`), `headroom=H` (fully free segments released, most recently
//! used first, to stay within (1 + H) × the high water), `merge` (under the
//! headroom, free segments that together hold the request are released and
//! re-made as one), `order=0|1|2` (best fit, address-ordered first fit,
//! best fit preferring the fullest segment), and `expand page=P` (one
//! contiguous heap per pool that grows at its end in pages of P bytes:
//! virtual memory, for comparison). Moving live blocks (2026-12-02):
//! `move_max=F` (before a new segment, the live blocks of the window of the
//! request's size holding the fewest live bytes, at most F × the request,
//! move to free blocks of other segments and the window serves it), `evac`
//! (under the headroom, partly live segments are emptied the same way,
//! fewest live bytes first, and released), `pin=N` (a block allocated in the
//! last N events may not move: commands recorded and not yet submitted may
//! use it), `submit_every=K slack=S` (moves only every K events: then
//! segments are emptied while more than S × the high water is reserved and
//! not live).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use vrampool::trace::{Action, Trace};
use vrampool::{Config, Engine, SimulatedDevice};

const MIB: u64 = 1 << 20;
const ALIGN: u64 = 256;

#[derive(Clone, Debug)]
pub struct Params {
    pub small_max: u64,   // requests <= go to small segments
    pub small_seg: u64,   // small segment size
    pub grow: f64,        // new heap segment = max(r, grow * reserved_heap)
    pub min_seg: u64,     // at least
    pub seg_round: u64,   // round segment sizes
    pub exact_above: f64, // requests > exact_above * high_water get exact segments (0 = off)
    pub headroom: Option<f64>,
    pub floor: u64,
    pub order: u8, // 0 best fit, 1 AOFF (oldest segment, lowest offset), 2 best fit fullest
    pub min_split: u64,
    pub max_seg: u64,
    pub expand: bool,
    pub page: u64,
    pub merge: bool,
    /// Before a new segment, move live blocks out of the cheapest window of
    /// the request's size into free blocks of other segments (at most
    /// `move_max` × the request's bytes moved); 0: off.
    pub move_max: f64,
    /// Under the headroom, partly live segments are emptied by moves and released.
    pub evac: bool,
    /// Moves only at submit points, every `submit_every` events (0: at any request).
    pub submit_every: u64,
    /// At a submit point, evacuate while reserved - live > this × the high water.
    pub slack: f64,
    /// A block allocated within the last `pin` events may not move (commands
    /// recorded and not yet submitted may use it).
    pub pin: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            small_max: 1 << 20,
            small_seg: 2 << 20,
            grow: 0.0,
            min_seg: 0,
            seg_round: 2 << 20,
            exact_above: 0.0,
            headroom: None,
            floor: 8 << 20,
            order: 0,
            min_split: 256,
            max_seg: 4 << 30,
            expand: false,
            page: 20 << 20,
            merge: false,
            move_max: 0.0,
            evac: false,
            submit_every: 0,
            slack: 0.05,
            pin: 0,
        }
    }
}

#[derive(Debug)]
struct Seg {
    size: u64,
    small: bool,
    live: u32,
    blocks: BTreeMap<u64, (u64, bool)>, // offset -> (size, free)
    last_used: u64,
}

#[derive(Default, Debug, Clone)]
pub struct Out {
    pub peak_reserved: u64,
    pub allocs: u64,
    pub created: u64,
    pub releases: u64,
    pub released: u64,
    pub peak_live: u64,
    pub moved: u64,
    pub moves: u64,
    pub compactions: u64,
}

pub struct Heap {
    p: Params,
    segs: Vec<Option<Seg>>,
    // (small?, size, seg, offset) for best fit
    free: BTreeSet<(bool, u64, u32, u64)>,
    // (small?, seg, offset) -> size for AOFF
    reserved: u64,
    reserved_heap: u64,
    live_bytes: u64,
    high_water: u64,
    tick: u64,
    out: Out,
    /// pointer -> location, location -> pointer (moves change locations)
    loc: HashMap<u64, (u32, u64)>,
    owner: HashMap<(u32, u64), u64>,
    born: HashMap<u64, u64>,
}

fn round(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

impl Heap {
    pub fn new(p: Params) -> Self {
        Heap {
            p,
            segs: vec![],
            free: BTreeSet::new(),
            reserved: 0,
            reserved_heap: 0,
            live_bytes: 0,
            high_water: 0,
            tick: 0,
            out: Out::default(),
            loc: HashMap::new(),
            owner: HashMap::new(),
            born: HashMap::new(),
        }
    }

    fn find(&self, small: bool, r: u64) -> Option<(u32, u64)> {
        match self.p.order {
            1 => {
                // address-ordered first fit: lowest seg id, lowest offset
                let mut best: Option<(u32, u64)> = None;
                for &(s, sz, seg, off) in self.free.range((small, r, 0, 0)..) {
                    if s != small {
                        break;
                    }
                    let _ = sz;
                    if best.is_none_or(|b| (seg, off) < b) {
                        best = Some((seg, off));
                    }
                }
                best
            }
            2 => {
                // best fit, among within 1/16 prefer fullest
                let mut it = self.free.range((small, r, 0, 0)..);
                let &(s, sz, seg, off) = it.next()?;
                if s != small {
                    return None;
                }
                let lim = sz + sz / 16;
                let live = |seg: u32| self.segs[seg as usize].as_ref().unwrap().live;
                let mut best = (live(seg), seg, off);
                for &(s2, sz2, seg2, off2) in it.take(7) {
                    if s2 != small || sz2 > lim {
                        break;
                    }
                    let l = live(seg2);
                    if l > best.0 {
                        best = (l, seg2, off2);
                    }
                }
                Some((best.1, best.2))
            }
            _ => {
                let &(s, _, seg, off) = self.free.range((small, r, 0, 0)..).next()?;
                (s == small).then_some((seg, off))
            }
        }
    }

    fn take(&mut self, seg: u32, off: u64, r: u64) -> (u32, u64) {
        let s = self.segs[seg as usize].as_mut().unwrap();
        let (size, free) = s.blocks[&off];
        assert!(free && size >= r);
        self.free.remove(&(s.small, size, seg, off));
        let rem = size - r;
        if rem >= self.p.min_split.max(ALIGN) {
            s.blocks.insert(off, (r, false));
            s.blocks.insert(off + r, (rem, true));
            self.free.insert((s.small, rem, seg, off + r));
        } else {
            s.blocks.insert(off, (size, false));
        }
        s.live += 1;
        s.last_used = self.tick;
        (seg, off)
    }

    fn new_seg(&mut self, size: u64, small: bool) -> u32 {
        let id = self.segs.len() as u32;
        let mut blocks = BTreeMap::new();
        if size > 0 {
            blocks.insert(0, (size, true));
        }
        self.segs.push(Some(Seg {
            size,
            small,
            live: 0,
            blocks,
            last_used: self.tick,
        }));
        if size > 0 {
            self.free.insert((small, size, id, 0));
        }
        self.reserved += size;
        if !small {
            self.reserved_heap += size;
        }
        self.out.allocs += 1;
        self.out.created += size;
        self.out.peak_reserved = self.out.peak_reserved.max(self.reserved);
        id
    }

    fn release_seg(&mut self, id: u32) {
        let s = self.segs[id as usize].take().unwrap();
        assert_eq!(s.live, 0);
        self.free.remove(&(s.small, s.size, id, 0));
        self.reserved -= s.size;
        if !s.small {
            self.reserved_heap -= s.size;
        }
        self.out.releases += 1;
        self.out.released += s.size;
    }

    pub fn alloc(&mut self, size: u64) -> (u32, u64) {
        self.tick += 1;
        let r = round(size.max(1), ALIGN);
        self.live_bytes += r;
        self.high_water = self.high_water.max(self.live_bytes);
        let small = r <= self.p.small_max;
        if let Some((seg, off)) = self.find(small, r) {
            return self.take(seg, off, r);
        }
        if !small && self.p.expand {
            return self.expand_alloc(r);
        }
        if !small
            && self.p.move_max > 0.0
            && self.p.submit_every == 0
            && let Some(a) = self.make_room(r)
        {
            return a;
        }
        let mut segsize = if small {
            self.p.small_seg.max(r)
        } else {
            let exact =
                self.p.exact_above > 0.0 && r as f64 > self.p.exact_above * self.high_water as f64;
            let g = if exact {
                r
            } else {
                ((self.reserved_heap as f64 * self.p.grow) as u64)
                    .max(self.p.min_seg)
                    .max(r)
            };
            round(g, self.p.seg_round).min(self.p.max_seg).max(r)
        };
        if let Some(h) = self.p.headroom {
            let target = (((self.high_water as f64) * (1.0 + h)) as u64).max(self.p.floor);
            if self.reserved + segsize > target {
                // shrink
                if self.reserved + r <= target {
                    segsize = round(target - self.reserved, ALIGN).min(segsize).max(r);
                } else {
                    segsize = r.max(if small { self.p.small_seg } else { 0 });
                    // release fully free segments, MRU first
                    let mut c: Vec<(u64, u32)> = self
                        .segs
                        .iter()
                        .enumerate()
                        .filter_map(|(i, s)| match s {
                            Some(s) if s.live == 0 => Some((s.last_used, i as u32)),
                            _ => None,
                        })
                        .collect();
                    c.sort_unstable_by(|a, b| b.cmp(a));
                    if self.p.merge && !small {
                        // merge: release free segments (MRU first) until their total holds r, make one of that total
                        let mut total = 0;
                        let mut take = vec![];
                        for &(_, i) in &c {
                            if total >= r {
                                break;
                            }
                            total += self.segs[i as usize].as_ref().unwrap().size;
                            take.push(i);
                        }
                        if total >= r && take.len() > 1 {
                            for i in take {
                                self.release_seg(i);
                            }
                            segsize = round(total, ALIGN);
                            let id = self.new_seg(segsize, small);
                            return self.take(id, 0, r);
                        }
                    }
                    for (_, i) in c {
                        if self.reserved + segsize <= target {
                            break;
                        }
                        self.release_seg(i);
                    }
                    if self.p.evac && !small && self.p.submit_every == 0 {
                        while self.reserved + segsize > target && self.release_sparsest() {}
                    }
                }
            }
        }
        let id = self.new_seg(segsize, small);
        self.take(id, 0, r)
    }

    /// A submit point: empty the sparsest segments by moves and release them
    /// while more than `slack` × the high water is reserved and not live.
    pub fn submit_point(&mut self) {
        let keep = (self.p.slack * self.high_water as f64) as u64;
        while self.reserved.saturating_sub(self.live_bytes) > keep.max(self.p.floor)
            && self.release_sparsest()
        {}
    }

    /// Empties by moves the heap segment with the fewest live bytes whose
    /// blocks fit elsewhere (one with none at once) and releases it; `false`
    /// if none could be. (Under the headroom the segments with no live block
    /// were released before, so only partly live ones are left there.)
    fn release_sparsest(&mut self) -> bool {
        let mut c: Vec<(u64, u32)> = self
            .segs
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                Some(s) if !s.small => Some((
                    s.blocks.values().filter(|b| !b.1).map(|b| b.0).sum(),
                    i as u32,
                )),
                _ => None,
            })
            .collect();
        c.sort_unstable();
        for (_, i) in c {
            if self.evacuate(i) {
                self.release_seg(i);
                return true;
            }
        }
        false
    }

    fn pinned(&self, seg: u32, off: u64) -> bool {
        self.p.pin > 0
            && self
                .owner
                .get(&(seg, off))
                .and_then(|p| self.born.get(p))
                .is_some_and(|&b| self.tick.saturating_sub(b) < self.p.pin)
    }

    /// Moves every live block of `seg` into free blocks of other segments,
    /// if they all fit.
    fn evacuate(&mut self, seg: u32) -> bool {
        let s = self.segs[seg as usize].as_ref().unwrap();
        let mut movers: Vec<(u64, u64)> = s
            .blocks
            .iter()
            .filter(|b| !b.1.1)
            .map(|(&o, &(z, _))| (o, z))
            .collect();
        if movers.iter().any(|&(o, _)| self.pinned(seg, o)) {
            return false;
        }
        movers.sort_by(|a, b| b.1.cmp(&a.1));
        let mut free = self.free.clone();
        let mut dest = vec![];
        for &(_, z) in &movers {
            let Some(found) = free
                .range((false, z, 0, 0)..)
                .take_while(|e| !e.0)
                .find(|e| e.2 != seg)
                .copied()
            else {
                return false;
            };
            free.remove(&found);
            if found.1 - z >= ALIGN {
                free.insert((false, found.1 - z, found.2, found.3 + z));
            }
            dest.push((found.2, found.3));
        }
        let mut cost = 0;
        for (k, &(o, z)) in movers.iter().enumerate() {
            let (ds, doff) = dest[k];
            self.take(ds, doff, z);
            self.free_block(seg, o);
            let ptr = self.owner.remove(&(seg, o)).unwrap();
            self.owner.insert((ds, doff), ptr);
            self.loc.insert(ptr, (ds, doff));
            cost += z;
        }
        self.out.moved += cost;
        self.out.moves += movers.len() as u64;
        self.out.compactions += 1;
        true
    }

    /// Moves the live blocks of the window of `r` bytes holding the fewest
    /// live bytes into free blocks of other segments, then takes the window.
    fn make_room(&mut self, r: u64) -> Option<(u32, u64)> {
        let cap = (self.p.move_max * r as f64) as u64;
        // (cost, seg, window start)
        let mut best: Option<(u64, u32, u64)> = None;
        for (i, s) in self.segs.iter().enumerate() {
            let Some(s) = s else { continue };
            if s.small || s.size < r {
                continue;
            }
            let bl: Vec<(u64, u64, bool)> = s
                .blocks
                .iter()
                .map(|(&o, &(z, f))| {
                    (
                        o,
                        if !f && self.pinned(i as u32, o) {
                            u64::MAX / 4
                        } else {
                            z
                        },
                        f,
                    )
                })
                .collect();
            let mut j = 0usize; // first block not fully before window end
            let mut live_in = 0u64;
            // window [bl[k].0, bl[k].0 + r)
            let mut end_idx = 0usize; // blocks [k, end_idx) overlap the window
            for k in 0..bl.len() {
                let ws = bl[k].0;
                if ws + r > s.size {
                    break;
                }
                while end_idx < bl.len() && bl[end_idx].0 < ws + r {
                    if !bl[end_idx].2 {
                        live_in += bl[end_idx].1;
                    }
                    end_idx += 1;
                }
                while j < k {
                    if !bl[j].2 {
                        live_in -= bl[j].1;
                    }
                    j += 1;
                }
                if live_in <= cap && best.is_none_or(|b| live_in < b.0) {
                    best = Some((live_in, i as u32, ws));
                }
            }
        }
        let (cost, seg, ws) = best?;
        let we = ws + r;
        let s = self.segs[seg as usize].as_ref().unwrap();
        let mut movers: Vec<(u64, u64)> = s
            .blocks
            .range(..we)
            .filter(|&(&o, &(z, f))| !f && o + z > ws)
            .map(|(&o, &(z, _))| (o, z))
            .collect();
        movers.sort_by(|a, b| b.1.cmp(&a.1));
        // plan destinations: best fit outside this segment, simulated on a copy of the free set
        let mut free = self.free.clone();
        let mut dest: Vec<(u32, u64, u64)> = vec![];
        for &(_, z) in &movers {
            let found = free
                .range((false, z, 0, 0)..)
                .take_while(|e| !e.0)
                .find(|e| e.2 != seg)
                .copied()?;
            free.remove(&found);
            if found.1 - z >= ALIGN {
                free.insert((false, found.1 - z, found.2, found.3 + z));
            }
            dest.push((found.2, found.3, z));
        }
        // carry out: take each destination (at its start), free each source
        for (k, &(o, z)) in movers.iter().enumerate() {
            let (ds, doff, _) = dest[k];
            // the destination block may have been split already: find the free block at doff
            let dss = self.segs[ds as usize].as_ref().unwrap();
            let (&bo, &(bz, bf)) = dss.blocks.range(..=doff).next_back().unwrap();
            assert!(bf && bo == doff && bz >= z);
            self.take(ds, doff, z);
            self.free_block(seg, o);
            let ptr = self.owner.remove(&(seg, o)).unwrap();
            self.owner.insert((ds, doff), ptr);
            self.loc.insert(ptr, (ds, doff));
        }
        self.out.moved += cost;
        self.out.moves += movers.len() as u64;
        self.out.compactions += 1;
        let s = self.segs[seg as usize].as_ref().unwrap();
        let (&bo, &(bz, bf)) = s.blocks.range(..=ws).next_back().unwrap();
        assert!(bf && bo + bz >= we, "window not free");
        Some(self.take(seg, bo, r))
    }

    /// One growing segment (id of the first heap seg), extended at its end.
    fn expand_alloc(&mut self, r: u64) -> (u32, u64) {
        let id = match self
            .segs
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| !s.small))
        {
            Some(i) => i as u32,
            None => self.new_seg(0, false),
        };
        let s = self.segs[id as usize].as_mut().unwrap();
        // free tail?
        let (toff, tsize, tfree) = match s.blocks.iter().next_back() {
            Some((&o, &(sz, f))) => (o, sz, f),
            None => (0, 0, false),
        };
        let tail = if tfree { tsize } else { 0 };
        let need = r - tail;
        let mapped_before = s.size;
        let new_end = round(s.size + need, self.p.page);
        let grow = new_end - mapped_before;
        if tfree {
            self.free.remove(&(false, tsize, id, toff));
            s.blocks.insert(toff, (tsize + grow, true));
            self.free.insert((false, tsize + grow, id, toff));
        } else {
            s.blocks.insert(mapped_before, (grow, true));
            self.free.insert((false, grow, id, mapped_before));
        }
        s.size = new_end;
        self.reserved += grow;
        self.reserved_heap += grow;
        self.out.allocs += 1;
        self.out.created += grow;
        self.out.peak_reserved = self.out.peak_reserved.max(self.reserved);
        let off = if tfree { toff } else { mapped_before };
        self.take(id, off, r)
    }

    pub fn free(&mut self, (seg, off): (u32, u64)) {
        self.tick += 1;
        let size = self.segs[seg as usize].as_ref().unwrap().blocks[&off].0;
        self.live_bytes -= size;
        self.free_block(seg, off);
    }

    fn free_block(&mut self, seg: u32, off: u64) {
        let s = self.segs[seg as usize].as_mut().unwrap();
        let (mut size, free) = s.blocks[&off];
        assert!(!free);
        s.live -= 1;
        s.last_used = self.tick;
        let mut start = off;
        // next
        if let Some((&noff, &(nsize, nfree))) = s.blocks.range(off + 1..).next()
            && nfree
        {
            debug_assert_eq!(noff, off + size);
            self.free.remove(&(s.small, nsize, seg, noff));
            s.blocks.remove(&noff);
            size += nsize;
        }
        if let Some((&poff, &(psize, pfree))) = s.blocks.range(..off).next_back()
            && pfree
        {
            self.free.remove(&(s.small, psize, seg, poff));
            s.blocks.remove(&off);
            start = poff;
            size += psize;
        }
        s.blocks.insert(start, (size, true));
        self.free.insert((s.small, size, seg, start));
    }
}

pub fn run(trace: &Trace, p: &Params) -> Out {
    let mut h = Heap::new(p.clone());
    let mut live: HashMap<u64, u64> = HashMap::new();
    let (mut cur, mut peak) = (0u64, 0u64);
    for (k, e) in trace.events.iter().enumerate() {
        if p.submit_every > 0 && p.evac && k as u64 % p.submit_every == 0 {
            h.submit_point();
        }
        match e.action {
            Action::Allocate => {
                let a = h.alloc(e.size);
                h.born.insert(e.pointer, h.tick);
                h.loc.insert(e.pointer, a);
                h.owner.insert(a, e.pointer);
                live.insert(e.pointer, e.size);
                cur += e.size;
                peak = peak.max(cur);
            }
            Action::Free => {
                let sz = live.remove(&e.pointer).unwrap();
                cur -= sz;
                let a = h.loc.remove(&e.pointer).unwrap();
                h.owner.remove(&a);
                h.free(a);
            }
        }
    }
    let mut o = h.out.clone();
    o.peak_live = peak;
    o
}

fn main() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..");
    let mut names: Vec<(String, std::path::PathBuf)> = vec![];
    for dir in ["data/traces", "data/traces/heldout"] {
        let mut fs: Vec<_> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.to_string_lossy().ends_with(".csv.gz"))
            .collect();
        fs.sort();
        for f in fs {
            let n = f
                .file_name()
                .unwrap()
                .to_string_lossy()
                .replace(".csv.gz", "");
            names.push((n, f));
        }
    }
    let mut p = Params::default();
    let mut verbose = false;
    for a in std::env::args().skip(1) {
        let (k, v) = a.split_once('=').unwrap_or((&a, ""));
        match k {
            "small_max" => p.small_max = v.parse().unwrap(),
            "small_seg" => p.small_seg = v.parse().unwrap(),
            "grow" => p.grow = v.parse().unwrap(),
            "min_seg" => p.min_seg = v.parse().unwrap(),
            "seg_round" => p.seg_round = v.parse().unwrap(),
            "exact_above" => p.exact_above = v.parse().unwrap(),
            "headroom" => p.headroom = Some(v.parse().unwrap()),
            "floor" => p.floor = v.parse().unwrap(),
            "order" => p.order = v.parse().unwrap(),
            "min_split" => p.min_split = v.parse().unwrap(),
            "expand" => p.expand = true,
            "merge" => p.merge = true,
            "page" => p.page = v.parse().unwrap(),
            "move_max" => p.move_max = v.parse().unwrap(),
            "evac" => p.evac = true,
            "submit_every" => p.submit_every = v.parse().unwrap(),
            "slack" => p.slack = v.parse().unwrap(),
            "pin" => p.pin = v.parse().unwrap(),
            "v" => verbose = true,
            _ => panic!("unknown setting {k}"),
        }
    }
    let (mut mr, mut ma, mut mb, mut n, mut sum_ratio, mut ms) = (0, 0, 0, 0, 0.0, 0.0);
    let mut tot_moved = [0u64; 4];
    let mut tot_comp = 0u64;
    for (name, f) in &names {
        let t = Trace::open(f).unwrap();
        for scale in [1u64, 16, 64] {
            let ts = t.scaled(scale);
            let o = run(&ts, &p);
            // The PyTorch preset on the simulated H200, as `vrampool corpus` runs it.
            let device = SimulatedDevice::with_max_buffer_size(141 << 30, 4 << 30);
            let mut e = Engine::new(device, Config::pytorch()).unwrap();
            let pt = vrampool::replay(&mut e, &ts, 0);
            let live = ts.peak_live;
            let ratio = o.peak_reserved as f64 / live as f64;
            let bound = (1.10 * live as f64 + 2.0 * MIB as f64).min(pt.peak_reserved as f64);
            let r_miss = o.peak_reserved as f64 > bound;
            let a_miss = scale == 1 && o.allocs > pt.device_allocs;
            let b_miss = scale == 1 && o.created > pt.segment_bytes_created;
            let dms = (o.allocs as f64
                + o.releases as f64
                + o.created as f64 / MIB as f64 * 21.9
                + o.released as f64 / MIB as f64 * 18.4)
                / 1000.0;
            if scale == 1 {
                ms += dms;
            }
            tot_moved[(scale.trailing_zeros() / 2) as usize] += o.moved;
            tot_comp += o.compactions;
            mr += r_miss as u32;
            ma += a_miss as u32;
            mb += b_miss as u32;
            sum_ratio += ratio;
            n += 1;
            let miss = format!(
                "{}{}{}",
                if r_miss { "R" } else { "" },
                if a_miss { "A" } else { "" },
                if b_miss { "B" } else { "" }
            );
            if verbose || !miss.is_empty() {
                println!(
                    "{:16} ÷{:<3} ratio {:.3} (pytorch {:.3}) allocs {:5} (pytorch {:5}) created {:9.1} MiB (pytorch {:9.1}) moved {:9.1} MiB in {} {}",
                    name,
                    scale,
                    ratio,
                    pt.reserved_ratio,
                    o.allocs,
                    pt.device_allocs,
                    o.created as f64 / MIB as f64,
                    pt.segment_bytes_created as f64 / MIB as f64,
                    o.moved as f64 / MIB as f64,
                    o.compactions,
                    miss
                );
            }
        }
    }
    println!(
        "{:?}\nR {mr} A {ma} B {mb} mean ratio {:.4} estimated device ms at ÷1 {:.0}",
        p,
        sum_ratio / n as f64,
        ms
    );
    println!(
        "moved GiB at ÷1 / ÷16 / ÷64: {:.2} / {:.3} / {:.4}; compactions {}",
        tot_moved[0] as f64 / (1u64 << 30) as f64,
        tot_moved[2] as f64 / (1u64 << 30) as f64,
        tot_moved[3] as f64 / (1u64 << 30) as f64,
        tot_comp
    );
}
