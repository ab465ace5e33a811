#!/usr/bin/env bash
# Threads as ranks (the step runner, every device a rank) against the pool
# (`--transport direct`) from 8 to 262144 devices: per case, build and
# transport, the medians over interleaved rounds of a run's time (the best of
# its --repeat runs, what `reshard run` reports), of the whole command's wall
# time (start-up: planning, compiling, starting the ranks, checking) and of
# its peak resident memory. A transport a build refuses (threads as ranks
# above its device limit) prints as refused.
#   bench/ranks_at_scale.sh [rounds=3] [threads=2] [RESHARD...]   (default: build/reshard)
#   TRANSPORTS="ranks" bench/ranks_at_scale.sh ...   (default: "ranks direct")
# Cases (docs/benchmarks.md, "Threads as ranks at scale"):
#   canonical 16 KiB: f32[16,16,16], P('y',None,'x') -> P(None,('x','y'),None) on x=4,y=2
#   transpose: f32, P('x','y') -> P('y','x') on a square mesh of 1024 to 262144 devices
#   (above 16384 only where the kernel guards fiber stacks inside one mapping)
#   all-gather: f32[65536], P('x') -> P(None) on x=1024 (a million messages)
set -euo pipefail
rounds=${1:-3} threads=${2:-2}
shift $(($# < 2 ? $# : 2))
bins=("$@")
[ ${#bins[@]} -eq 0 ] && bins=("$(dirname "$0")/../build/reshard")
# name devices repeat shape mesh from to (texts without spaces)
cases=("canonical-16KiB 8 200 16,16,16 x=4,y=2 P('y',None,'x') P(None,('x','y'),None)"
       "transpose-4MiB 1024 50 1024,1024 x=32,y=32 P('x','y') P('y','x')"
       "transpose-64MiB 4096 10 4096,4096 x=64,y=64 P('x','y') P('y','x')"
       "transpose-128MiB 16384 10 8192,4096 x=128,y=128 P('x','y') P('y','x')"
       "transpose-1GiB 65536 3 16384,16384 x=256,y=256 P('x','y') P('y','x')"
       "transpose-64MiB 262144 3 4096,4096 x=512,y=512 P('x','y') P('y','x')"
       "all-gather-256KiB 1024 3 65536 x=1024 P('x') P(None)")
out=$(mktemp) json=$(mktemp) timing=$(mktemp)
trap 'rm -f "$out" "$json" "$timing"' EXIT
for ((r = 0; r < rounds; ++r)); do
  for c in "${cases[@]}"; do
    read -r name devices repeat shape mesh from to <<<"$c"
    for bin in "${bins[@]}"; do
      for transport in ${TRANSPORTS:-ranks direct}; do
        # Into files, read once the run has ended (a reader started beside
        # it would take a core during the timed runs).
        err=$(mktemp)
        if /usr/bin/time -f "%e %M" -o "$timing" "$bin" run --shape "$shape" --dtype f32 --mesh "$mesh" --from "$from" \
             --to "$to" --threads "$threads" --repeat "$repeat" --transport "$transport" --json >"$json" 2>"$err"; then
          python3 -c "import json,sys; d=json.load(open(sys.argv[1])); w,m=open(sys.argv[2]).read().split()[-2:]; assert d['verified'], 'wrong result'; print('$name', '$devices', '$bin:$transport', d['seconds'], w, int(m) * 1024)" \
            "$json" "$timing" >>"$out"
        elif grep -q "run at most" "$err"; then  # the build's device limit for the ranks
          echo "$name $devices $bin:$transport refused - -" >>"$out"
        else
          echo "$bin run failed:" >&2; cat "$err" >&2; exit 1
        fi
        rm -f "$err"
      done
    done
  done
  echo "round $((r + 1)) of $rounds done" >&2
done
python3 - "$out" "$threads" <<'PY'
import collections, statistics, sys
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    name, devices, label, seconds, wall, rss = line.split()
    rows.setdefault((name, devices, label), []).append((seconds, wall, rss))
print("threads %s, %d rounds, medians" % (sys.argv[2], len(next(iter(rows.values())))))
print("| case | devices | build:transport | a run | the command (wall) | peak memory |")
print("|---|---|---|---|---|---|")
for (name, devices, label), v in rows.items():
    if any(x[0] == "refused" for x in v):
        print("| %s | %s | %s | refused | | |" % (name, devices, label))
        continue
    run, wall, rss = (statistics.median(float(x[i]) for x in v) for i in range(3))
    shown = "%.1f us" % (run * 1e6) if run < 1e-3 else "%.2f ms" % (run * 1e3)
    print("| %s | %s | %s | %s | %.2f s | %.0f MB |" % (name, devices, label, shown, wall, rss / 1e6))
PY
