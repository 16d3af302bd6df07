#!/bin/bash
# The engine's hot path and the pool hit on the H200 host, before and after a
# change, alternating in one session (binaries built here and stripped into
# .bin/: hot_path / hot_path_before = the criterion bench core/benches/hot_path.rs,
# vrampool / vrampool_before = the harness; the Vulkan loader carried in .gl/,
# see BENCHMARKS.md). Every output lands in $OUT. ROUNDS (default 2) before/after
# pairs; WARM and MEAS (default 1 and 2) the criterion warm-up and measurement seconds.
set -o pipefail
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv > $OUT/smi.txt 2>&1
lscpu | grep -E "Model name|^CPU\(s\)|MHz" > $OUT/lscpu.txt 2>&1
for i in $(seq 1 ${ROUNDS:-2}); do
  for b in before after; do
    sfx=""; [ $b = before ] && sfx=_before
    echo "== hot_path $b $i $(date +%T)" >> $OUT/log.txt
    timeout 120 .bin/hot_path$sfx --bench --warm-up-time ${WARM:-1} --measurement-time ${MEAS:-2} --noplot \
      2>&1 | grep -E "^hot_path|time:" > $OUT/hot_path-$b-$i.txt
    echo "== bench $b $i $(date +%T)" >> $OUT/log.txt
    timeout 90 .bin/vrampool$sfx bench --threads 1,2,4,8,16 --json > $OUT/bench-$b-$i.json 2>> $OUT/log.txt
  done
done
echo "== done $(date +%T)" >> $OUT/log.txt
cat $OUT/log.txt
