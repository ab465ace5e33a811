#!/usr/bin/env bash
# reshard against COSTA on block-cyclic layouts (docs/benchmarks.md, "Against
# COSTA"): builds COSTA from its source out of tree where no install exists,
# builds bench/costa_bench against it and runs it at 4 and 8 ranks.
#   bench/costa_vs_reshard.sh [costa_bench arguments, e.g. --size 4096 --rounds 7]
# Environment (defaults):
#   COSTA_SRC=../shared/anchors/costa-2.3.2  COSTA's source (never copied into this repository)
#   COSTA_BUILD=/tmp/costa-build  COSTA_PREFIX=/tmp/costa-install
#   BUILD_DIR=build-costa  RANKS="4 8"  JOBS=2
set -euo pipefail
cd "$(dirname "$0")/.."
costa_src=${COSTA_SRC:-$PWD/../shared/anchors/costa-2.3.2}
costa_build=${COSTA_BUILD:-/tmp/costa-build}
costa_prefix=${COSTA_PREFIX:-/tmp/costa-install}
build=${BUILD_DIR:-build-costa}
ranks=${RANKS:-"4 8"}
jobs=${JOBS:-2}

if [ ! -f "$costa_prefix/lib/cmake/costa/costaConfig.cmake" ]; then
  [ -f "$costa_src/CMakeLists.txt" ] || { echo "COSTA's source not found at $costa_src (set COSTA_SRC)" >&2; exit 2; }
  # The core library only: no ScaLAPACK wrappers, tests, miniapps or benchmarks.
  cmake -S "$costa_src" -B "$costa_build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOSTA_SCALAPACK=OFF \
    -DCOSTA_WITH_TESTS=OFF -DCOSTA_WITH_APPS=OFF -DCOSTA_WITH_BENCHMARKS=OFF -DCMAKE_INSTALL_PREFIX="$costa_prefix"
  cmake --build "$costa_build" -j "$jobs" --target install
fi

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRESHARD_BUILD_BENCHMARKS=ON \
  -Dcosta_DIR="$costa_prefix/lib/cmake/costa" >/dev/null
cmake --build "$build" -j "$jobs" --target costa_bench

echo "$(nproc) cores, $(free -g | awk '/Mem:/ {print $7}') GiB available"
# As tests/mpi/CMakeLists.txt: mpirun as root, more ranks than cores, no
# ptrace-based single copy; COSTA's packing single-threaded like every rank's.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=1
for n in $ranks; do
  echo
  echo "## $n ranks (load before: $(cut -d' ' -f1-3 /proc/loadavg))"
  mpirun -np "$n" --oversubscribe --allow-run-as-root "$build/bench/costa_bench" "$@"
done
