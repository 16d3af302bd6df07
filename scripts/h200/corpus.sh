#!/bin/bash
# One H200 run (binaries built here, stripped into .bin/: vrampool, vrampool_before,
# gpu_tests; the Vulkan loader carried in .gl/, see BENCHMARKS.md): issue 14's bench baseline (with --threads), issue 12's replay
# timing per trace (vrampool, pytorch, and the vrampool policy before this
# session's change, each with nvidia-smi), the GPU tests that need a driver
# with a memory budget. Every replay is its own process, results appended as
# they finish, so a timeout loses only what had not run.
set -o pipefail
B=.bin/vrampool
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv > $OUT/smi.txt 2>&1
$B info > $OUT/info.txt 2>&1
echo "== bench $(date +%T)" >> $OUT/log.txt
timeout 90 $B bench --threads 1,2,4,8,16 --json > $OUT/bench.json 2>> $OUT/log.txt
echo "== gpu tests --ignored $(date +%T)" >> $OUT/log.txt
[ -x .bin/gpu_tests ] && timeout 40 .bin/gpu_tests --ignored --test-threads 1 >> $OUT/log.txt 2>&1
end=$((SECONDS + ${BUDGET:-400}))
# The three runs of a trace rotate their order from trace to trace (and with
# ROTATE=1 or 2 from run to run), so no binary always runs first.
order=(vrampool pytorch before)
i=${ROTATE:-0}
for t in $(ls -S -r data/traces/*.csv.gz data/traces/heldout/*.csv.gz); do
  i=$((i + 1))
  for k in 0 1 2; do
    p=${order[$(( (i + k) % 3 ))]}
    left=$((end - SECONDS)); [ $left -lt 5 ] && { echo "out of time at $t $p" >> $OUT/log.txt; break 2; }
    if [ $p = before ]; then bin=.bin/vrampool_before; pol=vrampool; else bin=$B; pol=$p; fi
    echo "== $t $p $(date +%T)" >> $OUT/log.txt
    timeout $left $bin replay --policy $pol --nvidia-smi --json $t > /tmp/r.json 2>> $OUT/log.txt \
      && python3 -c "import json,sys; d=json.load(open('/tmp/r.json')); [r.update(run='$p') for r in d]; print(json.dumps(d))" >> $OUT/replays.jsonl
  done
done
echo "== done $(date +%T)" >> $OUT/log.txt
tail -30 $OUT/log.txt
