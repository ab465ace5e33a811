#!/usr/bin/env bash
# `reshard run` (in-process executor) against memcpy on the canonical case and
# a block-cyclic pair, at 64 MiB and up: every case, and every build given,
# run once per round, interleaved, so that drifts of the machine's memory
# bandwidth fall on all alike; prints per case and build the medians over the
# rounds of GB/s, memcpy GB/s (measured by each run, same bytes and threads)
# and fraction of memcpy, with the fraction's range.
#   bench/inprocess_vs_memcpy.sh [rounds=5] [threads=2] [RESHARD...]   (default: build/reshard)
# Cases (docs/benchmarks.md, "Block-cyclic in one process"):
#   canonical: f32[a,64,64], {devices=[2,1,4]<=[4,2]T(1,0)} -> {devices=[1,8,1]<=[8]}
#   block-cyclic: f64[a,4096], blockcyclic(block=[64,64], grid=[2,4]) -> blockcyclic(block=[128,128], grid=[4,2])
set -euo pipefail
rounds=${1:-5} threads=${2:-2}
shift $(($# < 2 ? $# : 2))
bins=("$@")
[ ${#bins[@]} -eq 0 ] && bins=("$(dirname "$0")/../build/reshard")
canonical=(--from '{devices=[2,1,4]<=[4,2]T(1,0)}' --to '{devices=[1,8,1]<=[8]}')
cyclic=(--dtype f64 --from 'blockcyclic(block=[64,64], grid=[2,4])' --to 'blockcyclic(block=[128,128], grid=[4,2])')
cases=("canonical 64MiB 4096,64,64" "canonical 256MiB 16384,64,64"
       "block-cyclic 64MiB 2048,4096" "block-cyclic 128MiB 4096,4096" "block-cyclic 256MiB 8192,4096")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((r = 0; r < rounds; ++r)); do
  for c in "${cases[@]}"; do
    read -r name size shape <<<"$c"
    if [ "$name" = canonical ]; then layouts=("${canonical[@]}"); else layouts=("${cyclic[@]}"); fi
    for bin in "${bins[@]}"; do
      "$bin" run --shape "$shape" "${layouts[@]}" --threads "$threads" --repeat 5 --json |
        python3 -c "import json,sys; d=json.load(sys.stdin); assert d['verified'], 'wrong result'; print('$name', '$size', '$bin', d['gbps'], d['memcpy_gbps'], d['fraction_of_memcpy'])" >>"$out"
    done
  done
  echo "round $((r + 1)) of $rounds done" >&2
done
python3 - "$out" "$threads" <<'PY'
import collections, statistics, sys
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    name, size, binary, gbps, memcpy, fraction = line.split()
    rows.setdefault((name, size, binary), []).append((float(gbps), float(memcpy), float(fraction)))
print("threads %s, %d rounds" % (sys.argv[2], len(next(iter(rows.values())))))
print("| case | size | build | GB/s | memcpy GB/s | fraction of memcpy (median) | range |")
print("|---|---|---|---|---|---|---|")
for (name, size, binary), v in rows.items():
    med = [statistics.median(x[i] for x in v) for i in range(3)]
    lo, hi = min(x[2] for x in v), max(x[2] for x in v)
    print("| %s | %s | %s | %.2f | %.2f | **%.2f** | %.2f-%.2f |" % (name, size, binary, *med, lo, hi))
PY
