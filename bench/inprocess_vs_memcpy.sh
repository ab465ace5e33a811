#!/usr/bin/env bash
# `reshard run` (in-process executor) against memcpy on the canonical case and
# block-cyclic pairs, at 64 MiB and up: every case, and every build given,
# run once per round, interleaved, so that drifts of the machine's memory
# bandwidth fall on all alike; prints per case and build the medians over the
# rounds of the time, GB/s, memcpy GB/s (measured by each run, same bytes and
# threads) and fraction of memcpy, with the fraction's range.
#   bench/inprocess_vs_memcpy.sh [rounds=5] [threads=2] [RESHARD...]   (default: build/reshard)
#   CASES=blocks bench/inprocess_vs_memcpy.sh ...   block sizes 8 to 256 instead
#   TRANSPORTS="direct ranks" bench/inprocess_vs_memcpy.sh ...   each transport in turn (default: reshard run's)
# Cases (docs/benchmarks.md, "Block-cyclic in one process" and "Short rows"):
#   canonical: f32[a,64,64], {devices=[2,1,4]<=[4,2]T(1,0)} -> {devices=[1,8,1]<=[8]}
#   block-cyclic: f64[a,4096], blockcyclic(block=[64,64], grid=[2,4]) -> blockcyclic(block=[128,128], grid=[4,2])
#   blocks: f64[4096,4096], blockcyclic(block=[b,b], grid=[2,4]) -> blockcyclic(block=[B,B], grid=[4,2])
set -euo pipefail
rounds=${1:-5} threads=${2:-2}
shift $(($# < 2 ? $# : 2))
bins=("$@")
[ ${#bins[@]} -eq 0 ] && bins=("$(dirname "$0")/../build/reshard")
canonical="f32 {devices=[2,1,4]<=[4,2]T(1,0)} {devices=[1,8,1]<=[8]}"
cyclic="f64 blockcyclic(block=[64,64],grid=[2,4]) blockcyclic(block=[128,128],grid=[4,2])"
cyclic_pair() { echo "f64 blockcyclic(block=[$1,$1],grid=[2,4]) blockcyclic(block=[$2,$2],grid=[4,2])"; }
# name size shape dtype from to (layout texts without spaces)
if [ "${CASES:-}" = blocks ]; then
  cases=("8->64 128MiB 4096,4096 $(cyclic_pair 8 64)" "16->128 128MiB 4096,4096 $(cyclic_pair 16 128)"
         "32->64 128MiB 4096,4096 $(cyclic_pair 32 64)" "64->128 128MiB 4096,4096 $(cyclic_pair 64 128)"
         "256->512 128MiB 4096,4096 $(cyclic_pair 256 512)")
else
  cases=("canonical 64MiB 4096,64,64 $canonical" "canonical 256MiB 16384,64,64 $canonical"
         "block-cyclic 64MiB 2048,4096 $cyclic" "block-cyclic 128MiB 4096,4096 $cyclic"
         "block-cyclic 256MiB 8192,4096 $cyclic")
fi
out=$(mktemp) json=$(mktemp)
trap 'rm -f "$out" "$json"' EXIT
for ((r = 0; r < rounds; ++r)); do
  for c in "${cases[@]}"; do
    read -r name size shape dtype from to <<<"$c"
    # The builds in turn, in reverse order every other round: a build run
    # right after another measured up to 40% slower on this machine than
    # alternated with it (f32 8x8 blocks on `direct`, 7.9 against 11.0 ms
    # in fixed order, 7.3 against 7.5 alternated).
    order=()
    for ((i = 0; i < ${#bins[@]}; ++i)); do
      if ((r % 2)); then order+=("${bins[${#bins[@]} - 1 - i]}"); else order+=("${bins[i]}"); fi
    done
    for bin in "${order[@]}"; do
      for transport in ${TRANSPORTS:-default}; do
        flag=() label=$bin
        [ "$transport" != default ] && flag=(--transport "$transport") label="$bin:$transport"
        # Into a file, read once the run has ended: a reader started in a
        # pipe beside it (python's start-up) took a core during the timed
        # runs, and threads as ranks, whose ranks wait for each other at
        # every barrier, lost up to half their speed to it.
        "$bin" run --shape "$shape" --dtype "$dtype" --from "$from" --to "$to" --threads "$threads" --repeat 5 \
          "${flag[@]}" --json >"$json"
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['verified'], 'wrong result'; print('$name', '$size', '$label', d['seconds'], d['gbps'], d['memcpy_gbps'], d['fraction_of_memcpy'])" "$json" >>"$out"
      done
    done
  done
  echo "round $((r + 1)) of $rounds done" >&2
done
python3 - "$out" "$threads" <<'PY'
import collections, statistics, sys
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    name, size, binary, seconds, gbps, memcpy, fraction = line.split()
    rows.setdefault((name, size, binary), []).append((float(seconds), float(gbps), float(memcpy), float(fraction)))
print("threads %s, %d rounds" % (sys.argv[2], len(next(iter(rows.values())))))
print("| case | size | build | time | GB/s | memcpy GB/s | fraction of memcpy (median) | range |")
print("|---|---|---|---|---|---|---|---|")
for (name, size, binary), v in rows.items():
    med = [statistics.median(x[i] for x in v) for i in range(4)]
    lo, hi = min(x[3] for x in v), max(x[3] for x in v)
    print("| %s | %s | %s | %.1f ms | %.2f | %.2f | **%.2f** | %.2f-%.2f |" % (name, size, binary, med[0] * 1e3, *med[1:], lo, hi))
PY
