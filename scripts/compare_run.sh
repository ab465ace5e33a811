#!/usr/bin/env bash
# Compares two builds of `reshard run` (in-process executor) on one machine,
# runs interleaved so that drifts of the machine's memory bandwidth fall on
# both alike, and prints per case and thread count the median GB/s, memcpy
# GB/s and fraction of memcpy of each build.
#   scripts/compare_run.sh OLD_RESHARD NEW_RESHARD [rounds=4]
# Cases, 64 MiB each: the canonical reshard scaled, rows to columns, a permutation.
set -euo pipefail
old=$1 new=$2 rounds=${3:-4}
declare -A cases=(
  [canonical]="--shape 4096,64,64 --from {devices=[2,1,4]<=[4,2]T(1,0)} --to {devices=[1,8,1]<=[8]}"
  [rows-to-columns]="--shape 4096,4096 --from {devices=[8,1]<=[8]} --to {devices=[1,8]<=[8]}"
  [permutation]="--shape 4096,4096 --from {devices=[8,1]<=[8]} --to {devices=[8,1]7,6,5,4,3,2,1,0}"
)
out=$(mktemp)
for ((i = 0; i < rounds; ++i)); do
  for bin in "$old" "$new"; do
    for t in 1 2; do
      for c in "${!cases[@]}"; do
        # shellcheck disable=SC2086
        "$bin" run ${cases[$c]} --threads "$t" --repeat 5 --json |
          python3 -c "import json,sys; d=json.load(sys.stdin); assert d['verified']; print('$c', '$t', '$bin', d['gbps'], d['memcpy_gbps'], d['fraction_of_memcpy'])" >>"$out"
      done
    done
  done
done
python3 - "$out" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    case, threads, binary, gbps, memcpy, fraction = line.split()
    rows[(case, threads, binary)].append((float(gbps), float(memcpy), float(fraction)))
print("| case | threads | build | GB/s | memcpy GB/s | fraction of memcpy |")
print("|---|---|---|---|---|---|")
for (case, threads, binary), v in sorted(rows.items()):
    med = [statistics.median(x[i] for x in v) for i in range(3)]
    print("| %s | %s | %s | %.2f | %.2f | %.2f |" % (case, threads, binary, *med))
PY
rm -f "$out"
