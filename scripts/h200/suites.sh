#!/usr/bin/env bash
# The GPU test suites on the H200's Vulkan driver (test binaries built here with
# `cargo test --release -p vrampool-tests --no-run` and copied into .bin/ under
# their test names; the Vulkan loader carried in .gl/, see BENCHMARKS.md), one
# test at a time (run in parallel, test binaries there hang now and then in the
# Vulkan loader's vkDestroyInstance: data/h200/vk-destroy-hang.txt), then the
# harness's pool hit against raw create_buffer + destroy if .bin/vrampool is
# there. Output in $OUT.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export XDG_RUNTIME_DIR=/tmp RUST_BACKTRACE=1 WGPU_BACKEND=vulkan
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv > $OUT/smi.txt 2>&1
{
for t in ${SUITES:-callbacks gpu embedding movable front front_handover}; do
  echo "== $t $(date +%T)"
  timeout ${SUITE_TIMEOUT:-240} .bin/$t --test-threads=1 2>&1 | grep -E "^test |test result|panicked"
done
echo "== done $(date +%T)"
} > $OUT/suites.txt 2>&1
cat $OUT/suites.txt
if [ -x .bin/vrampool ]; then
  timeout 120 .bin/vrampool bench --json > $OUT/bench.json 2> $OUT/bench-log.txt
  timeout 60 .bin/vrampool bench 2>&1 | tail -25
fi
