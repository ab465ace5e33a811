#!/usr/bin/env bash
# `reshard run` in one process on reshards outside bench/inprocess_vs_memcpy.sh
# (uneven shards, 16 devices, 3-D layouts, bf16 and f32 runs under a cache
# line), chosen to look for cases a change of the copy schedule slows down:
# every case, build and transport (ranks, direct) once per round,
# interleaved; prints per case the median time of a run and fraction of
# memcpy over the rounds (docs/benchmarks.md, "Small blocks and short lines
# by source"). Every run is verified; a failed one stops the script.
#   bench/inprocess_other_cases.sh [rounds=3] RESHARD...
set -euo pipefail
rounds=${1:-3}
shift $(($# < 1 ? $# : 1))
bins=("$@")
[ ${#bins[@]} -eq 0 ] && bins=("$(dirname "$0")/../build/reshard")
# name shape dtype mesh (- for none) from to (layout texts without spaces)
cases=(
  "uneven 4000,60,64 f32 x=4,y=2 P('y',None,'x') P(None,('x','y'),None)"
  "rows-to-cols 2048,8192 f32 - {devices=[64,1]<=[64]} {devices=[1,64]<=[64]}"
  "canonical-16dev 4096,64,64 f32 - {devices=[4,1,4]<=[4,4]T(1,0)} {devices=[1,16,1]<=[16]}"
  "bc16-to-32 4096,4096 f64 - blockcyclic(block=[16,16],grid=[4,2]) blockcyclic(block=[32,32],grid=[2,4])"
  "bc8-to-24-uneven 3000,3000 f64 - blockcyclic(block=[8,8],grid=[2,4]) blockcyclic(block=[24,24],grid=[4,2])"
  "3d-a 64,512,256 f32 x=4,y=2 P('x','y',None) P(None,'x','y')"
  "3d-e 256,256,128 f32 x=2,y=4 P('y','x',None) P(None,None,('x','y'))"
  "3d-y 256,256,256 f32 x=4,y=2 P(None,'y',None) P(None,None,'y')"
  "bf16-canonical 8192,64,64 bf16 x=4,y=2 P('y',None,'x') P(None,('x','y'),None)"
  "f32-canonical-x8 8192,64,64 f32 x=8,y=2 P('y',None,'x') P(None,('x','y'),None)"
  "f32-bc8 4096,4096 f32 - blockcyclic(block=[8,8],grid=[2,4]) blockcyclic(block=[64,64],grid=[4,2])"
  "bf16-bc8 4096,4096 bf16 - blockcyclic(block=[8,8],grid=[2,4]) blockcyclic(block=[64,64],grid=[4,2])"
)
out=$(mktemp) json=$(mktemp)
trap 'rm -f "$out" "$json"' EXIT
for ((r = 0; r < rounds; ++r)); do
  for c in "${cases[@]}"; do
    read -r name shape dtype mesh from to <<<"$c"
    mesh_flag=()
    [ "$mesh" != "-" ] && mesh_flag=(--mesh "$mesh")
    # The builds in turn, in reverse order every other round: a build run
    # right after another measured up to 40% slower on this machine than
    # alternated with it (f32 8x8 blocks on `direct`, 7.9 against 11.0 ms
    # in fixed order, 7.3 against 7.5 alternated).
    order=()
    for ((i = 0; i < ${#bins[@]}; ++i)); do
      if ((r % 2)); then order+=("${bins[${#bins[@]} - 1 - i]}"); else order+=("${bins[i]}"); fi
    done
    for bin in "${order[@]}"; do
      for transport in ranks direct; do
        # Into a file, read once the run has ended (a reader started beside
        # it would take a core during the timed runs).
        "$bin" run --shape "$shape" --dtype "$dtype" "${mesh_flag[@]}" --from "$from" --to "$to" --threads 2 \
          --repeat 5 --transport "$transport" --json >"$json"
        python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
assert d['verified'], 'not verified'
print(sys.argv[2], sys.argv[3], sys.argv[4], d['seconds'] * 1e3, d['fraction_of_memcpy'])" \
          "$json" "$name" "$bin" "$transport" >>"$out"
      done
    done
  done
  echo "round $((r + 1)) of $rounds done" >&2
done
python3 - "$out" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, bin, transport, ms, frac = line.split()
    runs[(name, transport, bin)].append((float(ms), float(frac)))
print("| case | transport | build | a run (median) | fraction of memcpy (median) |")
print("|---|---|---|---|---|")
for (name, transport, bin), v in runs.items():
    print(f"| {name} | {transport} | {bin} | {statistics.median(x[0] for x in v):.2f} ms | "
          f"{statistics.median(x[1] for x in v):.2f} |")
PY
