#!/bin/bash
# What the device is asked for the current code in one lease, in parts that each
# fit one call of the device tool (binaries built here and stripped into .bin/,
# see engine_hot_path.sh and corpus.sh; the Vulkan loader carried in .gl/):
#   hotpath  the engine's criterion bench and the pool hit, before and after
#            (engine_hot_path.sh, ROUNDS pairs, 1 by default)
#   r0 r1 r2 every trace at full size, vrampool and the PyTorch preset, the order
#            rotated by the run's number (corpus.sh)
#   scaled   every trace at ÷16 and ÷64, once
#   figures  on an H200 only: PyTorch's own figures for the fourth held-out set
#            (recorded on an H100), the same command and grid as then
# PARTS picks them (default: all, in that order). Each part's files land in
# $OUT/<part>/, and everything is packed into $OUT/<first part>.tgz at the end
# (the device tool brings back a few files only).
set -o pipefail
o=$OUT
parts=(${PARTS:-hotpath r0 r1 r2 scaled figures})
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
      if nvidia-smi -L | grep -q H200; then
        PYTHONUNBUFFERED=1 timeout 200 python3 scripts/traces/pytorch_figures.py --jobs 14 --chunk 40 \
          --mem-budget-gib 115 --kstep 10 beam_search recsys_train vae_decode > $o/$p/log.txt 2>&1
        cp data/traces/pytorch_figures.json $o/$p/
        tail -5 $o/$p/log.txt
      else
        echo "not an H200: no figures" | tee $o/$p/log.txt
      fi ;;
    *) echo "unknown part $p" ;;
  esac
done
(cd $o && tar czf ${parts[0]}.tgz "${parts[@]}" && rm -rf "${parts[@]}")
ls -la $o
