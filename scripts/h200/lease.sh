#!/bin/bash
# What the device is asked for the current code in one lease, in parts that each
# fit one call of the device tool (binaries built here and stripped into .bin/, see
# engine_hot_path.sh and corpus.sh, with the release test binaries `reliability` and
# `gpu_tests` for the tests part; the Vulkan loader carried in .gl/):
#   hotpath  the engine's criterion bench and the pool hit, before and after
#            (engine_hot_path.sh, ROUNDS pairs, 1 by default)
#   r0 r1 r2 every trace at full size, vrampool and the PyTorch preset, the order
#            rotated by the run's number (corpus.sh)
#   scaled   every trace at ÷16 and ÷64, once
#   figures  on an H200 only: PyTorch's own figures for the fourth held-out set
#            (recorded on an H100), on the 0.01 grid its H100 run used
#   tests    the tests that need a real GPU's memory: the reliability suite's
#            exhaustion tests and the GPU tests that need a driver's memory budget
# PARTS picks them (default: all but tests, in that order). Each part's files land in
# $OUT/<part>/, its exit status in $OUT/status.txt, and everything is packed into
# $OUT/<first part>.tgz at the end (the device tool brings back a few files only).
# Exits non-zero when a part failed.
set -o pipefail
if [ -d .gl ] && ! ldconfig -p | grep libvulkan.so.1 > /dev/null; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
[ -f .bin/bin.tar.xz ] && [ ! -x .bin/vrampool ] && tar xJf .bin/bin.tar.xz
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} WGPU_BACKEND=${WGPU_BACKEND:-vulkan}
o=$OUT
parts=(${PARTS:-hotpath r0 r1 r2 scaled figures})
failed=0
for p in "${parts[@]}"; do
  mkdir -p $o/$p
  echo "== part $p $(date +%T)"
  case $p in
    hotpath) OUT=$o/$p ROUNDS=${ROUNDS:-1} WARM=${WARM:-0.5} MEAS=${MEAS:-1} bash scripts/h200/engine_hot_path.sh ;;
    r[0-9]) OUT=$o/$p REPLAYS_ONLY=1 RUNS="vrampool pytorch" SCALES=1 ROTATE=${p#r} BUDGET=${BUDGET:-150} \
              bash scripts/h200/corpus.sh | tail -3 ;;
    scaled) OUT=$o/$p REPLAYS_ONLY=1 RUNS="vrampool pytorch" SCALES="16 64" BUDGET=${BUDGET:-150} \
              bash scripts/h200/corpus.sh | tail -3 ;;
    figures)
      if nvidia-smi -L | grep H200 > /dev/null; then
        PYTHONUNBUFFERED=1 timeout 200 python3 scripts/traces/pytorch_figures.py --jobs 14 --chunk 40 \
          --mem-budget-gib 115 --kstep 10 beam_search recsys_train vae_decode > $o/$p/log.txt 2>&1 \
          && cp data/traces/pytorch_figures.json $o/$p/
        rc=$?
        tail -5 $o/$p/log.txt
        (exit $rc)
      else
        echo "not an H200: no figures" | tee $o/$p/log.txt
      fi ;;
    tests)
      { timeout 90 .bin/reliability --ignored --nocapture --test-threads 1 exhausted \
          && timeout 60 .bin/gpu_tests --ignored --test-threads 1; } > $o/$p/log.txt 2>&1
      rc=$?
      grep -E "^test |test result" $o/$p/log.txt
      (exit $rc) ;;
    *) echo "unknown part $p"; false ;;
  esac
  rc=$?
  echo "$p $rc" >> $o/status.txt
  [ $rc -eq 0 ] || failed=1
done
(cd $o && tar czf ${parts[0]}.tgz "${parts[@]}" && rm -rf "${parts[@]}")
ls -la $o
cat $o/status.txt
exit $failed
