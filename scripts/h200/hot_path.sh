#!/bin/bash
# Issue 14's H200 run (binaries built here and stripped into .bin/: vrampool,
# vrampool_before = the core to compare against built with this bench harness
# (ad7e6ea: before the front cache; bef5662: before the lazy stamps), the release test
# binaries front, front_handover, gpu_tests, reliability, and the criterion
# bench pool_vs_raw; the Vulkan loader carried in .gl/, see BENCHMARKS.md).
# Before and after alternate in one session; every output lands in $OUT.
set -o pipefail
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv > $OUT/smi.txt 2>&1
lscpu > $OUT/lscpu.txt 2>&1
for i in 1 2; do
  for b in before after; do
    bin=.bin/vrampool; [ $b = before ] && bin=.bin/vrampool_before
    echo "== bench $b $i $(date +%T)" >> $OUT/log.txt
    timeout 60 $bin bench --threads 1,2,4,8,16 --json > $OUT/bench-$b-$i.json 2>> $OUT/log.txt
  done
done
echo "== criterion $(date +%T)" >> $OUT/log.txt
timeout 150 .bin/pool_vs_raw --bench --warm-up-time 0.3 --measurement-time 1 --noplot \
  > $OUT/criterion.txt 2>&1
echo "== tests $(date +%T)" >> $OUT/log.txt
# One test at a time: test binaries that drop Vulkan devices and instances on
# several threads at once can deadlock in the loader and driver there
# (vkDestroyInstance against vkDestroyDevice; data/h200/vk-destroy-hang.txt).
for t in front front_handover; do
  echo "== $t $(date +%T)" >> $OUT/tests.txt
  timeout 60 .bin/$t --test-threads 1 >> $OUT/tests.txt 2>&1
done
echo "== gpu_tests $(date +%T)" >> $OUT/tests.txt
timeout 60 .bin/gpu_tests --include-ignored --test-threads 1 >> $OUT/tests.txt 2>&1
echo "== reliability $(date +%T)" >> $OUT/log.txt
VRAMPOOL_THREAD_OPS=125000 VRAMPOOL_INTEGRITY_OPS=1000000 VRAMPOOL_INTEGRITY_LIVE_MIB=4096 \
  VRAMPOOL_INTEGRITY_MAX_MIB=256 timeout 300 .bin/reliability --nocapture > $OUT/reliability.txt 2>&1
rc=$?
echo "== done $(date +%T) rc $rc" >> $OUT/log.txt
grep -h "test result" $OUT/*.txt > $OUT/results.txt
cat $OUT/log.txt $OUT/results.txt
# The device tool brings back a few files only: keep the rest in one.
tail -n 40 $OUT/reliability.txt $OUT/smi.txt $OUT/lscpu.txt > $OUT/other.txt
rm -f $OUT/reliability.txt $OUT/smi.txt $OUT/lscpu.txt $OUT/results.txt
