#!/bin/bash
# One H200 run (binaries built here, stripped into .bin/: vrampool, vrampool_before,
# gpu_tests; the Vulkan loader carried in .gl/, see BENCHMARKS.md): issue 14's bench baseline (with --threads), issue 12's replay
# timing per trace (vrampool, pytorch, and the vrampool policy before this
# session's change, each with nvidia-smi; SUBMIT=N adds --submit-every N to
# every replay; RUNS entries may be policy@hints, see
# `--memory-hints`, or vrampool+FIELD=VALUE[+FIELD=VALUE] for the default with
# `--set` changes), the GPU tests that need a driver
# with a memory budget. Every replay is its own process, results appended as
# they finish, so a timeout loses only what had not run.
set -o pipefail
B=.bin/vrampool
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv > $OUT/smi.txt 2>&1
$B info > $OUT/info.txt 2>&1
if [ -z "${REPLAYS_ONLY:-}" ]; then
  echo "== bench $(date +%T)" >> $OUT/log.txt
  timeout 90 $B bench --threads 1,2,4,8,16 --json > $OUT/bench.json 2>> $OUT/log.txt
  echo "== gpu tests --ignored $(date +%T)" >> $OUT/log.txt
  [ -x .bin/gpu_tests ] && timeout 40 .bin/gpu_tests --ignored --test-threads 1 >> $OUT/log.txt 2>&1
fi
end=$((SECONDS + ${BUDGET:-400}))
# The runs of a trace (RUNS, default vrampool pytorch before) rotate their
# order from trace to trace (and with ROTATE from run to run), so no binary
# always runs first; SCALES (default 1) replays each trace divided by N too;
# TRACES (default: all of data/traces, smallest first) picks the traces.
order=(${RUNS:-vrampool pytorch before})
n=${#order[@]}
i=${ROTATE:-0}
for s in ${SCALES:-1}; do
for t in ${TRACES:-$(ls -S -r data/traces/*.csv.gz data/traces/heldout/*.csv.gz)}; do
  i=$((i + 1))
  for k in $(seq 0 $((n - 1))); do
    p=${order[$(( (i + k) % n ))]}
    left=$((end - SECONDS)); [ $left -lt 5 ] && { echo "out of time at $t $p" >> $OUT/log.txt; break 3; }
    # A run named policy@hints replays with --memory-hints hints (not `before`:
    # binaries before fddc8a7 have no such flag).
    hints=(); case $p in *@*) hints=(--memory-hints ${p#*@}); p0=${p%@*};; *) p0=$p;; esac
    # `ceiling` is the vrampool policy taking LIMIT (a --budget, e.g. 1.5x) as a
    # LimitKind::Ceiling; LIMIT applies to every run of this call.
    extra=(); [ -n "${LIMIT:-}" ] && extra=(--budget $LIMIT)
    # SUBMIT=N: every engine run frees as a caller submitting every N events
    # does (replay --submit-every N; replay refuses it for size-class and
    # none, which ignore it).
    case $p0 in size-class|none) ;; *) [ -n "${SUBMIT:-}" ] && extra+=(--submit-every $SUBMIT);; esac
    if [ $p0 = before ]; then bin=.bin/vrampool_before; pol=vrampool;
    # `follow` is the vrampool policy following each trace's own static plan
    # (replay --follow: the workload run again exactly as it was recorded).
    # Not under LIMIT or SUBMIT (replay refuses them with --follow: a plan is
    # its own budget, its frees at once as recorded).
    elif [ $p0 = follow ]; then
      [ -n "${LIMIT:-}${SUBMIT:-}" ] && { echo "a follow run under LIMIT or SUBMIT: skipped" >> $OUT/log.txt; continue; }
      bin=$B; pol=vrampool; extra+=(--follow);
    # `relocatable` is the vrampool policy with every tensor relocatable
    # (replay --relocatable: live blocks moved with copy_buffer_to_buffer).
    # Not under a LIMIT (replay refuses --relocatable under a budget, where
    # nothing moves): use a ceiling run for that.
    elif [ $p0 = relocatable ]; then
      [ -n "${LIMIT:-}" ] && { echo "a relocatable run under LIMIT moves nothing: skipped" >> $OUT/log.txt; continue; }
      bin=$B; pol=vrampool; extra+=(--relocatable);
    elif [ $p0 = ceiling ]; then
      [ -z "${LIMIT:-}" ] && { echo "a ceiling run needs LIMIT (e.g. 1.5x)" >> $OUT/log.txt; continue; }
      bin=$B; pol=vrampool; extra+=(--ceiling);
    elif [ "${p0%%+*}" = vrampool ] && [ "$p0" != vrampool ]; then
      # vrampool+FIELD=VALUE[+FIELD=VALUE...]: the default with --set changes.
      bin=$B; pol=vrampool; IFS=+ read -ra sets <<< "${p0#vrampool+}"
      for kv in "${sets[@]}"; do extra+=(--set "$kv"); done
    else bin=$B; pol=$p0; fi
    echo "== $t ÷$s $p $(date +%T)" >> $OUT/log.txt
    # Exit 3 is a replay that ran out of memory (2 before 2026-12-06, when it
    # was also clap's usage error): its figures are kept, with its rc, so
    # totals over the file see the rows that ran out too.
    timeout $left $bin replay --policy $pol "${hints[@]}" "${extra[@]}" --scale $s --nvidia-smi --json $t > /tmp/r.json 2>> $OUT/log.txt
    rc=$?
    # (A `before` binary may predate that: its 2 is kept too; a usage error
    # leaves /tmp/r.json empty, and the Python below then fails.)
    { [ $rc -eq 0 ] || [ $rc -eq 3 ] || { [ $p0 = before ] && [ $rc -eq 2 ]; }; } \
      && python3 -c "import json,sys; d=json.load(open('/tmp/r.json')); [r.update(run='$p', scale=$s, rc=$rc) for r in d]; print(json.dumps(d))" >> $OUT/replays.jsonl
  done
done
done
echo "== done $(date +%T)" >> $OUT/log.txt
tail -30 $OUT/log.txt
