#!/usr/bin/env bash
# Configures and builds one flavour of reshard: release (default), asan or fuzz.
#   scripts/build.sh [release|asan|fuzz]   -> build/, build-asan/ or build-fuzz/
set -euo pipefail
cd "$(dirname "$0")/.."
flavour=${1:-release}
jobs=$(nproc 2>/dev/null || echo 2)
case "$flavour" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=Release) ;;
  # -O1 with line tables only: what the sanitizers' docs advise for readable reports, and half the
  # compile time of -O2 -g under instrumentation (CLI11's templates: 66 s a file against 34).
  # The fuzzers likewise: -O1 is what libFuzzer's docs build with.
  asan) dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
                               -DRESHARD_SANITIZE=ON -DRESHARD_BUILD_BENCHMARKS=OFF) ;;
  fuzz) dir=build-fuzz; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG"
                               -DRESHARD_FUZZ=ON -DRESHARD_BUILD_TESTS=OFF
                               -DRESHARD_BUILD_BENCHMARKS=OFF -DRESHARD_BUILD_CLI=OFF
                               -DCMAKE_CXX_COMPILER=clang++) ;;
  *) echo "usage: $0 [release|asan|fuzz]" >&2; exit 2 ;;
esac
cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
targets=()
[ "$flavour" = fuzz ] && targets=(--target fuzzers)  # the fuzzers and what they link, nothing else
cmake --build "$dir" -j "$jobs" "${targets[@]}"
