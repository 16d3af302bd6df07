#!/usr/bin/env bash
# Fuzzes the trace reader and random engine operation sequences with cargo-fuzz
# (libFuzzer) for FUZZ_SECONDS each (default 60; 0 skips fuzzing), from the
# seeds in fuzz/seeds/, with libFuzzer's seed FUZZ_SEED (default 1: the same
# inputs in the same order every run, so a red run is the commit's, not the
# dice's; set another to explore). Run by scripts/test.sh. Safe Rust
# throughout, so no sanitizer (`-s none`), with debug assertions on (`-a`) so
# an overflow is a crash; the stable toolchain (cargo-fuzz works on it this
# way; FUZZ_TOOLCHAIN=nightly for another).
# A crash fails the run; keep its input in fuzz/regressions/<target>/ and
# core/tests/fuzz_regressions.rs replays it on stable from then on.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${FUZZ_SECONDS:-60}"
if [ "$secs" = 0 ]; then
  echo "FUZZ_SECONDS=0: no fuzzing"
  exit 0
fi
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --version 0.13.2 --locked
toolchain=()
[ -n "${FUZZ_TOOLCHAIN:-}" ] && toolchain=("+$FUZZ_TOOLCHAIN")
for target in trace_reader engine_ops; do
  corpus="$(mktemp -d)"
  extra=()
  [ -f "$target.dict" ] && extra+=("-dict=$target.dict")
  echo "fuzzing $target for ${secs}s"
  if ! cargo "${toolchain[@]}" fuzz run -s none -a "$target" "$corpus" "seeds/$target" -- \
      -max_total_time="$secs" -seed="${FUZZ_SEED:-1}" -max_len=8192 -print_final_stats=1 "${extra[@]}" 2>"$corpus.log"; then
    tail -40 "$corpus.log" >&2
    echo "error: fuzz target $target crashed; its input is in fuzz/artifacts/$target/." \
      "Add it to fuzz/regressions/$target/, fix the bug, and core/tests/fuzz_regressions.rs keeps it fixed." >&2
    exit 1
  fi
  grep -E "^stat::number_of_executed_units|^Done" "$corpus.log" || true
  rm -rf "$corpus" "$corpus.log"
done
