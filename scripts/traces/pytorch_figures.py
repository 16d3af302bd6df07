#!/usr/bin/env python3
"""PyTorch's caching allocator on every data/traces/*.csv.gz and data/traces/heldout/*.csv.gz
(RMM CSV logs), on a CUDA GPU.

For each trace, and each allocator setting (PyTorch's default, then
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, set in the child's environment before
torch initialises CUDA):

- replay: the log alone through torch.cuda.caching_allocator_alloc / caching_allocator_delete,
  no kernels, unconstrained, in a fresh process (empty_cache + reset_peak_memory_stats
  first): peak reserved / peak live, device allocations (memory_stats()["num_device_alloc"]),
  and wall time per allocate/free called from Python. These replays run one at a time.
- min budget: the smallest set_per_process_memory_fraction, as a multiple x of peak live
  (fraction = x * peak_live / total, total = cudaMemGetInfo's total, the figure PyTorch
  multiplies the fraction by), under which the replay finishes with no OOM. Success is not
  monotone in the budget (resnet_train: 1.031 finishes, 1.032-1.035 fail, 1.036-1.037
  finish, 1.038-1.049 fail, 1.050 up finish), so instead of bisecting, every budget on the
  0.001 grid from 1.000 to just above the unconstrained ratio is tried. Reported: the
  smallest budget that finishes (min budget), the smallest from which every larger budget
  on the grid finishes (safe budget), and what a bisection between 1.000 and the grid's top
  would return on this map. Attempts run in processes of --chunk budgets each; between
  attempts every block is freed and empty_cache() returns every segment, so each attempt
  starts from an empty allocator. The min and safe budgets are then re-checked in fresh
  processes (x finishes, x - 0.001 does not); device allocations at a budget are those of
  that attempt. Scanning processes run several at a time (--jobs), no more together than
  --mem-budget-gib of caps (the unconstrained replays above run alone).
- real run: peak reserved / peak live of the workload itself, from recording.json (written
  by record.py) or, for the three traces of shared/traces, the README's figure.

Peak live is the trace's own: the largest sum of live Size fields (requested bytes).

With --kstep s the grid's step is s/1000 instead of 0.001 (budgets 1.000, 1.000 + s/1000,
...; min and safe budgets are then those of the coarser grid, and the fresh re-checks test
x and x - s/1000). With --scan-seconds T the script picks, after the unconstrained replays,
the smallest step of 1, 2, 3, 5, 10, 20, 50 whose estimated scan time fits in T seconds
(each attempt estimated at 3 x the unconstrained replay's time + 0.3 s, 0.5 s with
expandable segments, plus 8 s per process), and records the step it used.

With --scale N every size is divided by N (at least 1 byte), as vrampool's `--scale N` and
`Trace::scaled` divide them, and the figures go to <dir>/pytorch_figures_div<N>.json instead.

Usage: PYTHONUNBUFFERED=1 python3 scripts/traces/pytorch_figures.py [--dir data/traces]
       [--jobs 8] [--mem-budget-gib 100] [--no-verify] [--configs default,expandable]
       [--chunk 128] [--skip-replay] [--kstep 1] [--scan-seconds T] [--scale N] [names...]
Writes <dir>/pytorch_figures.json (pytorch_figures_div<N>.json with --scale N) and prints a
markdown table.
"""

import argparse
import glob
import gzip
import json
import math
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# The README of shared/traces gives the real-run ratio of its three traces (not re-runnable
# here: the workloads' code is not in the repo).
README_REAL_RUN = {"gpt_train": 1.123, "resnet_train": 1.166, "batch_sweep": 2.037}
README_FIGURES = {  # replay ratio, device allocs, us/op, min budget, device allocs at min,
    # expandable ratio, expandable min budget, expandable us/op
    "gpt_train": (1.123, 231, 3.59, 1.123, 2520, 1.088, 1.010, 9.7),
    "resnet_train": (1.193, 359, 3.49, 1.031, 4365, 1.019, 1.016, 8.1),
    "batch_sweep": (2.035, 67, 3.23, 1.124, 875, 1.121, 1.005, 8.2),
}

CONFIGS = {"default": None, "expandable": "expandable_segments:True"}


# Every size is divided by this (at least 1 byte), as `Trace::scaled` divides them; the
# parent's --scale, passed to its children in the environment.
SCALE = int(os.environ.get("VRAMPOOL_TRACE_SCALE", "1"))


def load(path):
    """Read an RMM CSV(.gz) log into replay ops [(slot, size)] (size 0 = free of slot), every
    size divided by SCALE."""
    op = gzip.open if path.endswith(".gz") else open
    ops, live, slots = [], {}, 0
    cur = peak = n_alloc = largest = 0
    with op(path, "rt") as f:
        header = f.readline().strip()
        assert header == "Thread,Time,Action,Pointer,Size,Stream", header
        for ln, line in enumerate(f, 2):
            parts = line.rstrip("\n").split(",")
            act, ptr, size = parts[2].strip(), int(parts[3], 16), int(parts[4])
            if act == "allocate":
                if size <= 0:
                    raise ValueError(f"{path}:{ln}: allocation of size {size}")
                size = max(1, size // SCALE)
                if ptr in live:
                    raise ValueError(f"{path}:{ln}: {ptr:#x} allocated again while live")
                live[ptr] = (slots, size)
                ops.append((slots, size))
                slots += 1
                cur += size
                n_alloc += 1
                peak = max(peak, cur)
                largest = max(largest, size)
            elif act in ("free", "deallocate"):
                if ptr not in live:
                    raise ValueError(f"{path}:{ln}: free of {ptr:#x}, which is not live")
                s, sz = live.pop(ptr)
                ops.append((s, 0))
                cur -= sz
            elif act == "allocate failure":
                continue
            else:
                raise ValueError(f"{path}:{ln}: unknown action {act!r}")
    return dict(ops=ops, slots=slots, peak_live=peak, allocations=n_alloc, largest=largest,
                live_at_end=len(live), events=len(ops))


# ----------------------------------------------------------------------------------------
# child side (runs on the GPU)
# ----------------------------------------------------------------------------------------


def _stat(torch, key):
    return torch.cuda.memory_stats().get(key, 0)


def _is_oom(torch, e):
    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower()


def _is_expandable(torch):
    try:
        segs = torch.cuda.memory._snapshot()["segments"]
        return any(s.get("is_expandable") for s in segs) if segs else None
    except Exception:  # noqa: BLE001
        return None


def child_replay(path, wait=False):
    """Unconstrained replay in this fresh process; timing of every allocate/free."""
    import torch

    tr = load(path)
    ops, slots = tr["ops"], tr["slots"]
    torch.cuda.init()
    torch.cuda.current_stream()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    d0, f0 = _stat(torch, "num_device_alloc"), _stat(torch, "num_device_free")
    if wait:  # started ahead of its turn: wait for the parent's word, so no replay overlaps
        print("READY", flush=True)
        sys.stdin.readline()
    alloc = torch.cuda.caching_allocator_alloc
    delete = torch.cuda.caching_allocator_delete
    P = [0] * slots
    t0 = time.perf_counter()
    for slot, size in ops:
        if size:
            P[slot] = alloc(size)
        else:
            delete(P[slot])
    dt = time.perf_counter() - t0
    res = dict(
        peak_reserved=torch.cuda.max_memory_reserved(),
        peak_allocated=torch.cuda.max_memory_allocated(),
        device_allocs=_stat(torch, "num_device_alloc") - d0,
        device_frees=_stat(torch, "num_device_free") - f0,
        us_per_op=dt / len(ops) * 1e6, ops=len(ops), seconds=dt,
        expandable=_is_expandable(torch),
        alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        torch=torch.__version__, device=torch.cuda.get_device_name(0),
        total_memory=torch.cuda.get_device_properties(0).total_memory,
        mem_get_info_total=torch.cuda.mem_get_info()[1],
    )
    res["ratio"] = res["peak_reserved"] / tr["peak_live"]
    return res


class Replayer:
    def __init__(self, path):
        import torch

        self.torch = torch
        self.tr = load(path)
        torch.cuda.init()
        torch.cuda.current_stream()
        self.total = torch.cuda.mem_get_info()[1]
        self.cache = {}

    def attempt(self, k):
        """Replay under fraction = (k/1000) * peak_live / total. Returns (ok, allocs, peak)."""
        if k in self.cache:
            return self.cache[k]
        torch = self.torch
        ops, slots, peak_live = self.tr["ops"], self.tr["slots"], self.tr["peak_live"]
        torch.cuda.empty_cache()
        assert torch.cuda.memory_reserved() == 0, torch.cuda.memory_reserved()
        frac = min(1.0, (k / 1000.0) * peak_live / self.total)
        torch.cuda.set_per_process_memory_fraction(frac)
        torch.cuda.reset_peak_memory_stats()
        d0 = _stat(torch, "num_device_alloc")
        alloc = torch.cuda.caching_allocator_alloc
        delete = torch.cuda.caching_allocator_delete
        P = [0] * slots
        ok = True
        try:
            for slot, size in ops:
                if size:
                    P[slot] = alloc(size)
                else:
                    delete(P[slot])
                    P[slot] = 0
        except Exception as e:  # noqa: BLE001
            if not _is_oom(torch, e):
                raise
            ok = False
        res = (ok, _stat(torch, "num_device_alloc") - d0, torch.cuda.max_memory_reserved())
        for p in P:
            if p:
                delete(p)
        torch.cuda.empty_cache()
        self.cache[k] = res
        return res


def child_scan(path, k0, k1, step=1):
    """Attempts at every k in [k0, k1] (budget k/1000 x peak live) on the grid of step
    `step` from k0, in this process."""
    r = Replayer(path)
    t0 = time.perf_counter()
    ok, allocs = [], []
    for k in range(k0, k1 + 1, step):
        o, d, _ = r.attempt(k)
        ok.append("1" if o else "0")
        allocs.append(d)
    return dict(k0=k0, k1=k1, step=step, ok="".join(ok), allocs=allocs,
                seconds=time.perf_counter() - t0)


def summarise_map(okmap, k0=1000, step=1):
    """From the success map on the grid of step `step` (in 0.001) starting at k0: the
    smallest success, the smallest k from which every k up to the map's end succeeds, and
    what a bisection between k0 and the map's end (assumed to succeed) would have returned."""
    ks = [k0 + i * step for i, c in enumerate(okmap) if c == "1"]
    if not ks:
        return None, None, None
    first = ks[0]
    last_fail = max([k0 + i * step for i, c in enumerate(okmap) if c == "0"], default=k0 - step)
    safe = last_fail + step
    lo, hi = 0, len(okmap) - 1
    if okmap[0] == "1":
        bis = lo
    else:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if okmap[mid] == "1":
                hi = mid
            else:
                lo = mid
        bis = hi
    return first, safe, k0 + bis * step


def child_attempt(path, k):
    r = Replayer(path)
    ok, allocs, peak = r.attempt(k)
    return dict(k=k, ok=ok, device_allocs=allocs, peak_reserved=peak)


# ----------------------------------------------------------------------------------------
# parent side
# ----------------------------------------------------------------------------------------


def run_child(args, conf, timeout):
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    env.pop("PYTORCH_NO_CUDA_MEMORY_CACHING", None)
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    cmd = [sys.executable, os.path.abspath(__file__)] + args
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return dict(error=f"timeout after {timeout}s")
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return dict(error=f"rc={p.returncode}: {p.stderr[-2000:]}")


class MemGate:
    """Lets jobs run together while the sum of their GPU memory estimates stays in budget."""

    def __init__(self, budget):
        self.budget, self.used, self.cv = budget, 0, threading.Condition()

    def __enter__(self):
        return self

    def take(self, need):
        need = min(need, self.budget)
        with self.cv:
            while self.used + need > self.budget:
                self.cv.wait()
            self.used += need
        return need

    def give(self, need):
        with self.cv:
            self.used -= need
            self.cv.notify_all()

    def __exit__(self, *a):
        return False


def fmt_int(n):
    return "–" if n is None else f"{n:,}"


def f3(x):
    return "–" if x is None else f"{x:.3f}"


def main():
    global SCALE
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*")
    ap.add_argument("--dir", default=os.path.join(REPO, "data", "traces"))
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--mem-budget-gib", type=float, default=100.0)
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--prewarm", type=int, default=8)
    ap.add_argument("--chunk", type=int, default=128, help="budgets per scanning process")
    ap.add_argument("--skip-replay", action="store_true",
                    help="reuse the unconstrained replays already in pytorch_figures.json")
    ap.add_argument("--configs", default="default,expandable")
    ap.add_argument("--kstep", type=int, default=1, help="grid step in 0.001 (default 1)")
    ap.add_argument("--scan-seconds", type=float,
                    help="pick the finest grid step whose estimated scan fits in this time")
    ap.add_argument("--scale", type=int, default=1,
                    help="divide every size by this (at least 1 byte), as vrampool's --scale")
    ap.add_argument("--replay")
    ap.add_argument("--wait", action="store_true")
    ap.add_argument("--scan", help="(internal) scan budgets k0..k1 of this trace")
    ap.add_argument("--k0", type=int)
    ap.add_argument("--k1", type=int)
    ap.add_argument("--attempt")
    ap.add_argument("--k", type=int)
    args = ap.parse_args()
    if args.scale != 1:
        if args.scale < 1:
            ap.error("--scale must be at least 1")
        # load() reads it here and in every child, which inherits the environment.
        os.environ["VRAMPOOL_TRACE_SCALE"] = str(args.scale)
        SCALE = args.scale
    if args.replay:
        print("RESULT " + json.dumps(child_replay(args.replay, args.wait)), flush=True)
        return
    if args.scan:
        print("RESULT " + json.dumps(child_scan(args.scan, args.k0, args.k1, args.kstep)),
              flush=True)
        return
    if args.attempt:
        print("RESULT " + json.dumps(child_attempt(args.attempt, args.k)), flush=True)
        return

    T0 = time.perf_counter()

    def log(msg):
        print(f"[{time.perf_counter() - T0:6.1f}s] {msg}", flush=True)

    paths = sorted(glob.glob(os.path.join(args.dir, "*.csv.gz")))
    paths += sorted(glob.glob(os.path.join(args.dir, "heldout", "*.csv.gz")))
    names = [os.path.basename(p)[: -len(".csv.gz")] for p in paths]
    if args.names:
        keep = [(n, p) for n, p in zip(names, paths) if n in args.names]
        names, paths = [n for n, _ in keep], [p for _, p in keep]
    configs = [c for c in args.configs.split(",") if c]
    rec = {}
    rp = os.path.join(args.dir, "recording.json")
    # The workload's own run was at full size: its figures say nothing of a scaled replay.
    if os.path.exists(rp) and SCALE == 1:
        with open(rp) as f:
            rec = json.load(f)
    out_path = os.path.join(
        args.dir, "pytorch_figures.json" if SCALE == 1 else f"pytorch_figures_div{SCALE}.json")
    out = dict(meta={}, traces={})
    if os.path.exists(out_path):
        with open(out_path) as f:
            out = json.load(f)
    out["meta"]["scale"] = SCALE
    for n, p in zip(names, paths):
        tr = load(p)
        t = dict(file=os.path.relpath(p, args.dir), allocations=tr["allocations"],
                 events=tr["events"], peak_live=tr["peak_live"], largest=tr["largest"],
                 live_at_end=tr["live_at_end"])
        if os.path.basename(os.path.dirname(p)) == "heldout":
            t["held_out"] = True
        if n in rec:
            t["real_run"] = rec[n]["real_run_ratio"]
            t["real_run_source"] = "recording.json (max_memory_reserved / peak live)"
            t["max_memory_reserved"] = rec[n]["max_memory_reserved"]
        elif n in README_REAL_RUN and SCALE == 1:
            t["real_run"] = README_REAL_RUN[n]
            t["real_run_source"] = "shared/traces/README.md (not re-run)"
        old = out["traces"].get(n, {})
        out["traces"][n] = {**old, **t}
        log(f"{n}: {tr['allocations']} allocations, peak live {tr['peak_live']:,} B")

    def save():
        with open(out_path + ".tmp", "w") as f:
            json.dump(out, f, indent=1, sort_keys=True)
        os.replace(out_path + ".tmp", out_path)

    # Phase A: unconstrained replays, one at a time (their timings are reported). Each runs
    # in its own fresh process. --prewarm processes are started together (import torch, read
    # the trace, initialise CUDA); once all of them are ready they replay one after another,
    # so nothing else runs on the machine during a timed replay.
    queue = [(n, p, c) for c in configs for n, p in zip(names, paths)]

    def start(job):
        n, p, c = job
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        env.pop("PYTORCH_NO_CUDA_MEMORY_CACHING", None)
        if CONFIGS[c]:
            env["PYTORCH_CUDA_ALLOC_CONF"] = CONFIGS[c]
        cmd = [sys.executable, os.path.abspath(__file__), "--replay", p, "--wait"]
        return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)

    if args.skip_replay:
        queue = [j for j in queue if "ratio" not in out["traces"][j[0]].get(j[2], {}).get("replay", {})]
    while queue:
        # start a batch, wait until every one of them is ready, then let them replay in turn
        batch = [(job, start(job)) for job in queue[: args.prewarm]]
        del queue[: args.prewarm]
        ready = []
        for job, proc in batch:
            line = "x"
            while line and not line.startswith("READY"):
                line = proc.stdout.readline()
            ready.append(bool(line))
        for ((n, p, c), proc), rdy in zip(batch, ready):
            try:
                so, se = proc.communicate("go\n" if rdy else None, timeout=300)
                r = None
                for line in so.splitlines():
                    if line.startswith("RESULT "):
                        r = json.loads(line[7:])
                if r is None:
                    r = dict(error=f"rc={proc.returncode}: {se[-2000:]}")
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                r = dict(error="timeout")
            out["traces"][n].setdefault(c, {})["replay"] = r
            if "error" in r:
                log(f"{n} [{c}] replay FAILED: {r['error']}")
            else:
                out["meta"].update(torch=r["torch"], device=r["device"],
                                   total_memory=r["total_memory"],
                                   mem_get_info_total=r["mem_get_info_total"])
                log(f"{n} [{c}] replay: ratio {r['ratio']:.3f}, {r['device_allocs']} device allocs, "
                    f"{r['us_per_op']:.2f} us/op, expandable={r['expandable']}")
            save()

    # Phase B: every budget on the 0.001 grid from 1.000 to just above the unconstrained
    # ratio, in chunks of --chunk budgets per process, several processes at a time within a
    # memory budget; then the smallest success and the safe threshold are re-checked in
    # fresh processes.
    gate = MemGate(int(args.mem_budget_gib * 2**30))
    lock = threading.Lock()

    def need(n, x):
        return int(x * out["traces"][n]["peak_live"] * 1.02) + 2**30

    def plan(step):
        chunks, maps = [], {}
        for c in configs:
            for n, p in zip(names, paths):
                rr = out["traces"][n].get(c, {}).get("replay", {})
                if "ratio" not in rr:
                    continue
                hi = max(1001, math.ceil(rr["ratio"] * 1000) + 1)
                hi = 1000 + math.ceil((hi - 1000) / step) * step  # the grid's top, on the grid
                maps[(n, c)] = dict(p=p, hi=hi, parts={})
                span = args.chunk * step
                for k0 in range(1000, hi + 1, span):
                    chunks.append((n, p, c, k0, min(hi, k0 + span - step)))
        return chunks, maps

    def estimate(chunks):
        """Estimated wall seconds of the scan: per attempt 3 x the unconstrained replay's
        time + 0.3 s (0.5 s with expandable segments), 8 s per process; greedy over jobs."""
        ts = []
        for n, p, c, k0, k1 in chunks:
            rr = out["traces"][n][c]["replay"]
            per = 3 * rr["seconds"] + (0.5 if c == "expandable" else 0.3)
            ts.append(8 + per * ((k1 - k0) // step + 1))
        lanes = [0.0] * max(1, args.jobs)
        for t in sorted(ts, reverse=True):
            lanes[lanes.index(min(lanes))] += t
        return max(lanes)

    step = args.kstep
    if args.scan_seconds:
        for step in (1, 2, 3, 5, 10, 20, 50):
            if estimate(plan(step)[0]) <= args.scan_seconds:
                break
    chunks, maps = plan(step)
    log(f"grid step {step / 1000:.3f}; estimated scan {estimate(chunks):.0f} s")
    chunks.sort(key=lambda j: (-(j[4] - j[3]) * out["traces"][j[0]]["events"], j[3]))
    log(f"scanning {sum((j[4] - j[3]) // step + 1 for j in chunks)} budgets in {len(chunks)} "
        "processes")

    def scan_job(job):
        n, p, c, k0, k1 = job
        m = gate.take(need(n, k1 / 1000 + 0.01))
        try:
            r = run_child(["--scan", p, "--k0", str(k0), "--k1", str(k1), "--kstep", str(step)],
                          CONFIGS[c], 600)
        finally:
            gate.give(m)
        with lock:
            maps[(n, c)]["parts"][k0] = r
        if "error" in r:
            log(f"{n} [{c}] scan {k0}..{k1} FAILED: {r['error']}")

    with ThreadPoolExecutor(args.jobs) as ex:
        list(ex.map(scan_job, chunks))

    def finish(key):
        n, c = key
        mp = maps[key]
        parts = [mp["parts"][k] for k in sorted(mp["parts"])]
        if any("error" in q for q in parts):
            b = dict(error="; ".join(q["error"] for q in parts if "error" in q))
        else:
            okmap = "".join(q["ok"] for q in parts)
            allocs = [a for q in parts for a in q["allocs"]]
            first, safe, bis = summarise_map(okmap, 1000, step)
            b = dict(grid_from=1.0, grid_step=step / 1000, grid_to=mp["hi"] / 1000, ok_map=okmap,
                     device_allocs_map=allocs, scan_seconds=sum(q["seconds"] for q in parts))
            if first is None:
                b["min_budget"] = None
            else:
                b.update(min_budget=first / 1000, min_k=first, safe_budget=safe / 1000,
                         bisection_budget=bis / 1000, monotone=(first == safe),
                         device_allocs_at_min=allocs[(first - 1000) // step],
                         device_allocs_at_safe=allocs[(safe - 1000) // step])
                if not args.no_verify:
                    checks = {}
                    for kk in sorted({first, first - step, safe, safe - step}):
                        if kk < 1000:
                            continue
                        m = gate.take(need(n, kk / 1000 + 0.01))
                        try:
                            checks[str(kk)] = run_child(["--attempt", mp["p"], "--k", str(kk)],
                                                        CONFIGS[c], 300)
                        finally:
                            gate.give(m)
                    b["fresh_checks"] = checks
                    want = {first: True, first - step: False, safe: True, safe - step: False}
                    b["fresh_agrees"] = all(checks[str(kk)].get("ok") == want[kk] for kk in
                                            map(int, checks))
                    if checks.get(str(first), {}).get("ok"):
                        b["device_allocs_at_min_fresh"] = checks[str(first)]["device_allocs"]
        with lock:
            out["traces"][n].setdefault(c, {})["min_budget"] = b
            save()
        if b.get("min_budget") is None:
            log(f"{n} [{c}] min budget: none ({b.get('error', 'no success on the grid')})")
        else:
            log(f"{n} [{c}] smallest success {b['min_budget']:.3f} (device allocs "
                f"{b['device_allocs_at_min']}), every budget from {b['safe_budget']:.3f} up "
                f"succeeds, bisection would give {b['bisection_budget']:.3f}; "
                f"{okmap.count('1')}/{len(okmap)} budgets succeed; fresh processes agree: "
                f"{b.get('fresh_agrees')}")

    with ThreadPoolExecutor(args.jobs) as ex:
        list(ex.map(finish, list(maps)))
    out["meta"]["method"] = __doc__.strip().split("\n\n", 1)[1]
    out["meta"]["seconds"] = round(time.perf_counter() - T0, 1)
    save()
    log(f"done; wrote {out_path}")
    print()
    print(table(out))


def table(out):
    def g(t, c, *keys):
        d = t.get(c, {})
        for k in keys:
            if not isinstance(d, dict) or k not in d:
                return None
            d = d[k]
        return d

    lines = [
        "| trace | allocations | peak live bytes | real run | replay ratio | replay device allocs | "
        "µs/op (Python) | min budget | device allocs at min | safe budget | expandable replay ratio | "
        "expandable µs/op | expandable min budget | expandable device allocs at min |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n, t in sorted(out["traces"].items()):
        da = g(t, "default", "min_budget", "device_allocs_at_min_fresh")
        if da is None:
            da = g(t, "default", "min_budget", "device_allocs_at_min")
        ea = g(t, "expandable", "min_budget", "device_allocs_at_min_fresh")
        if ea is None:
            ea = g(t, "expandable", "min_budget", "device_allocs_at_min")
        us = g(t, "default", "replay", "us_per_op")
        eus = g(t, "expandable", "replay", "us_per_op")
        lines.append(
            f"| {n} | {t['allocations']} | {t['peak_live']:,} | {f3(t.get('real_run'))} | "
            f"{f3(g(t, 'default', 'replay', 'ratio'))} | {fmt_int(g(t, 'default', 'replay', 'device_allocs'))} | "
            f"{'–' if us is None else f'{us:.2f}'} | {f3(g(t, 'default', 'min_budget', 'min_budget'))} | "
            f"{fmt_int(da)} | {f3(g(t, 'default', 'min_budget', 'safe_budget'))} | "
            f"{f3(g(t, 'expandable', 'replay', 'ratio'))} | "
            f"{'–' if eus is None else f'{eus:.2f}'} | {f3(g(t, 'expandable', 'min_budget', 'min_budget'))} | "
            f"{fmt_int(ea)} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
