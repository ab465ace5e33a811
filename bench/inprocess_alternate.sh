#!/usr/bin/env bash
# Two builds of `reshard run` alternated on one pair of layouts: each round
# runs each build once (--threads 2 --repeat 5, or $REPEAT), the order
# flipped every round, and prints each build's median and fastest run and
# the median (and quartiles) of the rounds' ratios B/A. On a noisy machine
# the ratio of runs taken side by side varies far less than either build's
# times over a session (docs/benchmarks.md, "Random block-cyclic pairs:
# strips after their rows, whole lines off a line streamed"). Every run is
# verified; a failed one stops the script.
#   bench/inprocess_alternate.sh RESHARD_A RESHARD_B SHAPE DTYPE FROM TO [rounds=15] [transport=ranks]
#   MESH=x=8,y=2 for layouts over a named mesh.
set -euo pipefail
[ $# -ge 6 ] || { sed -n 2,11p "$0" >&2; exit 2; }
a=$1 b=$2 shape=$3 dtype=$4 from=$5 to=$6 rounds=${7:-15} transport=${8:-ranks}
json=$(mktemp) out=$(mktemp)
trap 'rm -f "$json" "$out"' EXIT
run() {
  # Into a file, read once the run has ended (a reader beside it would take a core).
  "$1" run --shape "$shape" --dtype "$dtype" ${MESH:+--mesh "$MESH"} --from "$from" --to "$to" --threads 2 \
    --repeat "${REPEAT:-5}" --transport "$transport" --json >"$json"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['verified'], 'wrong result'; print(d['seconds'] * 1e3)" "$json"
}
for ((r = 0; r < rounds; ++r)); do
  if ((r % 2)); then tb=$(run "$b"); ta=$(run "$a"); else ta=$(run "$a"); tb=$(run "$b"); fi
  echo "$ta $tb" >>"$out"
done
python3 - "$out" "$a" "$b" <<'PY'
import statistics, sys
v = [tuple(map(float, l.split())) for l in open(sys.argv[1])]
r = sorted(b / a for a, b in v)
for name, xs in ((sys.argv[2], [a for a, _ in v]), (sys.argv[3], [b for _, b in v])):
    print("%s: median %.2f ms, fastest %.2f ms" % (name, statistics.median(xs), min(xs)))
print("B/A, median of %d rounds' ratios: %.3f (quartiles %.3f-%.3f)" % (len(r), statistics.median(r), r[len(r) // 4], r[3 * len(r) // 4]))
PY
