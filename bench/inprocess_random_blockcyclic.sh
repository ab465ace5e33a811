#!/usr/bin/env bash
# `reshard run` in one process on random block-cyclic pairs of 64 to 128 MiB
# (square f32 or f64 arrays, some of a side no block size divides; square
# blocks of 8 to 200 on 2x4, 4x2, 8x1 or 1x8 grids, each side drawn
# alone), drawn from a seed: cases nobody tuned the copy schedule on. Every
# case, build and transport (ranks, direct) once per round, interleaved,
# in reverse order every other round; per case the median time of a run
# and fraction of memcpy over the rounds, then per build and transport how
# many cases ran under 0.8 of
# memcpy and the median over cases of the time against the first build's
# `direct` (docs/benchmarks.md, "Random block-cyclic pairs"). Every run is
# verified; a failed one stops the script.
#   bench/inprocess_random_blockcyclic.sh [rounds=3] [cases=12] [seed=1] RESHARD...
# LIST=1: prints the cases, one a line ("SHAPE DTYPE FROM TO"), and runs
# none (to alternate two builds on each: bench/inprocess_alternate.sh).
set -euo pipefail
rounds=${1:-3} count=${2:-12} seed=${3:-1}
shift $(($# < 3 ? $# : 3))
bins=("$@")
[ ${#bins[@]} -eq 0 ] && bins=("$(dirname "$0")/../build/reshard")
python3 - "$rounds" "$count" "$seed" "${bins[@]}" <<'PY'
import json, os, random, statistics, subprocess, sys, tempfile
rounds, count, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
bins = sys.argv[4:]
rng = random.Random(seed)
grids = ["2,4", "4,2", "8,1", "1,8"]
blocks = [8, 16, 24, 32, 48, 64, 100, 128, 200]
cases = []
for _ in range(count):
    dtype = rng.choice(["f64", "f32"])
    side = int((rng.choice([64, 96, 128]) * 2**20 / (8 if dtype == "f64" else 4)) ** 0.5)
    side = rng.choice([side, side - side % 64, side + 37])
    b1, b2, g1, g2 = rng.choice(blocks), rng.choice(blocks), rng.choice(grids), rng.choice(grids)
    cases.append(("%s[%d] %dx%d on %s -> %dx%d on %s" % (dtype, side, b1, b1, g1, b2, b2, g2), dtype, side,
                  "blockcyclic(block=[%d,%d],grid=[%s])" % (b1, b1, g1), "blockcyclic(block=[%d,%d],grid=[%s])" % (b2, b2, g2)))
if os.environ.get("LIST", "0") not in ("", "0"):
    for _, dtype, side, src, dst in cases:
        print("%d,%d %s %s %s" % (side, side, dtype, src, dst))
    sys.exit(0)
runs = [(b, t) for b in bins for t in ("ranks", "direct")]
times = {}
# Into a file, read once the run has ended (a reader started beside it
# would take a core during the timed runs).
with tempfile.NamedTemporaryFile() as out:
    for r in range(rounds):
        for name, dtype, side, src, dst in cases:
            # Builds and transports in reverse order every other round (a run
            # right after another build's read up to 40% slower here).
            for b, t in runs if r % 2 == 0 else runs[::-1]:
                subprocess.run([b, "run", "--shape", "%d,%d" % (side, side), "--dtype", dtype, "--from", src, "--to", dst,
                                "--threads", "2", "--repeat", "5", "--transport", t, "--json"], stdout=out.file, check=True)
                out.file.flush()
                out.file.seek(0)
                d = json.load(out.file)
                out.file.seek(0)
                out.file.truncate()
                assert d["verified"], "wrong result: %s %s %s" % (b, t, name)
                times.setdefault((name, b, t), []).append((d["seconds"], d["fraction_of_memcpy"]))
        print("round %d of %d done" % (r + 1, rounds), file=sys.stderr)
print("seed %d, %d cases, %d rounds, 2 threads, medians" % (seed, count, rounds))
print("| case | " + " | ".join("%s:%s" % (b, t) for b, t in runs) + " |")
print("|---|" + "---|" * len(runs))
med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in times.items()}
for name, *_ in cases:
    print("| %s | " % name + " | ".join("%.2f ms, %.2f" % (med[(name, b, t)][0] * 1e3, med[(name, b, t)][1]) for b, t in runs) + " |")
print()
print("| build:transport | cases under 0.8 of memcpy | median of time / %s:direct |" % bins[0])
print("|---|---|---|")
for b, t in runs:
    under = sum(med[(name, b, t)][1] < 0.8 for name, *_ in cases)
    ratio = statistics.median(med[(name, b, t)][0] / med[(name, bins[0], "direct")][0] for name, *_ in cases)
    print("| %s:%s | %d of %d | %.2f |" % (b, t, under, len(cases), ratio))
PY
