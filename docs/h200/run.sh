#!/usr/bin/env bash
# Built at commit 577fd92.
# Reliability runs on the H200 (issue 5); everything lands in $OUT.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export XDG_RUNTIME_DIR=/tmp RUST_BACKTRACE=1
smi() { nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader; }
( while true; do echo "$(date +%T.%N | cut -c1-12) $(smi)"; sleep 0.5; done ) > $OUT/smi_samples.txt 2>&1 &
SAMPLER=$!
{
echo "## nvidia-smi before"; smi
echo "## .bin/reliability --ignored --exact oom::a_really_exhausted_device_is_caught_released_retried_and_recovers --nocapture"
time .bin/reliability --ignored --exact oom::a_really_exhausted_device_is_caught_released_retried_and_recovers --nocapture 2>&1
echo "## nvidia-smi after the pool test"; smi
echo "## .bin/reliability --ignored --exact oom::raw_wgpu_on_an_exhausted_device_panics --nocapture"
time .bin/reliability --ignored --exact oom::raw_wgpu_on_an_exhausted_device_panics --nocapture 2>&1
echo "## nvidia-smi after the raw test"; smi
} > $OUT/exhaust.txt 2>&1
{
echo "## VRAMPOOL_INTEGRITY_OPS=1000000 VRAMPOOL_INTEGRITY_LIVE_MIB=4096 VRAMPOOL_INTEGRITY_MAX_MIB=256 .bin/reliability integrity --nocapture"
time VRAMPOOL_INTEGRITY_OPS=1000000 VRAMPOOL_INTEGRITY_LIVE_MIB=4096 VRAMPOOL_INTEGRITY_MAX_MIB=256 .bin/reliability integrity --nocapture 2>&1
} > $OUT/integrity.txt 2>&1
{
echo "## .bin/reliability (every CI test, on the H200)"
time .bin/reliability --nocapture 2>&1
echo "## .bin/gpu --ignored (real OOM via wgpu's memory budget)"
time .bin/gpu --ignored 2>&1
} > $OUT/suite.txt 2>&1
kill $SAMPLER
tail -5 $OUT/exhaust.txt; tail -5 $OUT/integrity.txt; tail -8 $OUT/suite.txt
