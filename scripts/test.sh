#!/usr/bin/env bash
# Every test: the release build's tests, each parser's fuzzer for a bounded
# time, then the whole suite again under AddressSanitizer + UBSan.
#   FUZZ_SECONDS=20 (per fuzzer)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc 2>/dev/null || echo 2)
# Each phase's header says when it began (bash's SECONDS: since the script
# started), so a slow run shows which phase grew.
phase() { echo "== [$((SECONDS / 60)) min $((SECONDS % 60)) s] $*"; }

phase "release build and tests"
scripts/build.sh release
(cd build && ctest --output-on-failure -j "$jobs")

phase "real JAX 0.10.2 (8 CPU devices): emitted JAX and HLO over the corpus"
tests/jax/run_jax_tests.sh

phase "Python package (pip install .) and reshard.jax in real JAX (8 CPU devices), the canonical example"
tests/python/run_python_tests.sh

phase "reshard.torch on 8 gloo processes (installs torch once), against DTensor.redistribute"
tests/torch/run_torch_tests.sh

phase "fuzzers (${FUZZ_SECONDS:-20} s each, $jobs at a time)"
scripts/build.sh fuzz
# One fuzzer per core: each is single-threaded and runs for a fixed time.
fuzz_one() {
  local f=$1 work
  work=$(mktemp -d)
  if ! "$f" -max_total_time="${FUZZ_SECONDS:-20}" -max_len=256 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$work/" "$work" tests/fuzz/corpus >"$work/log" 2>&1; then
    { tail -40 "$work/log"; echo "fuzzer $(basename "$f") found a problem; its input is kept in $work"; } >&2
    return 1
  fi
  echo "$(basename "$f"): $(grep -E 'DONE' "$work/log" | tail -1)"
  rm -rf "$work"
}
running=() fuzz_failed=0
trap '[ ${#running[@]} -eq 0 ] || kill "${running[@]}" 2>/dev/null || true' EXIT   # none outlives an interrupted run
for f in build-fuzz/tests/fuzz/fuzz_*; do
  fuzz_one "$f" & running+=($!)
  if [ ${#running[@]} -ge "$jobs" ]; then
    wait "${running[0]}" || fuzz_failed=1
    running=("${running[@]:1}")
  fi
done
for p in "${running[@]}"; do wait "$p" || fuzz_failed=1; done
running=()
[ "$fuzz_failed" = 0 ] || exit 1

phase "AddressSanitizer + UndefinedBehaviorSanitizer build and tests"
# The consumer builds (packaging, compiled without sanitizers) ran in the release pass.
scripts/build.sh asan
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
   ctest --output-on-failure -j "$jobs" -E '^consumer\.')
phase "done"
