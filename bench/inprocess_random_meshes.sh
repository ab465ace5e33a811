#!/usr/bin/env bash
# Two builds of `reshard run` (the default transport) on random JAX-style
# reshards of 3-D arrays over the mesh x=4,y=2 (each dim None, 'x', 'y',
# ('x','y') or ('y','x'), each axis at most once a side; f32 or bf16; 2^24
# elements, 32 or 64 MiB), drawn from a seed: layouts beside the 2-D
# block-cyclic ones of bench/inprocess_random_blockcyclic.sh, where a
# rank's local boxes are planes of rows (docs/benchmarks.md, "Random
# block-cyclic pairs: columns of long rows": a change that held on every
# 2-D pair took one of these 2 to 3 times the time).
# One run of each build per case (--repeat 5, the best counts), the order
# flipped from case to case; prints per case the ratio B/A, highest first,
# to pick the cases to alternate longer (bench/inprocess_alternate.sh with
# MESH=x=4,y=2): a single run's ratio varies by a quarter here. Every run
# is verified; a failed one stops the script.
#   bench/inprocess_random_meshes.sh COUNT SEED RESHARD_A RESHARD_B
set -euo pipefail
[ $# -eq 4 ] || { sed -n 2,15p "$0" >&2; exit 2; }
python3 - "$@" <<'PY'
import json, random, subprocess, sys, tempfile
count, seed, a, b = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
rng = random.Random(seed)
dims = [None, "'x'", "'y'", "('x','y')", "('y','x')"]
def spec():
    while True:
        s = [rng.choice(dims) for _ in range(3)]
        axes = [c for d in s if d for c in "xy" if c in d]
        if len(axes) == len(set(axes)):
            return "P(%s)" % ",".join(d or "None" for d in s)
shapes = ["256,256,256", "512,128,256", "64,512,512", "1024,64,256", "128,256,512", "256,512,128"]
rows = []
with tempfile.NamedTemporaryFile() as out:
    for i in range(count):
        src, dst = spec(), spec()
        if src == dst:
            continue
        shape, dtype = rng.choice(shapes), rng.choice(["f32", "bf16"])
        ms = {}
        for name, binary in ((("A", a), ("B", b)) if i % 2 == 0 else (("B", b), ("A", a))):
            # Into a file, read once the run has ended (a reader beside it would take a core).
            subprocess.run([binary, "run", "--shape", shape, "--dtype", dtype, "--mesh", "x=4,y=2", "--from", src,
                            "--to", dst, "--threads", "2", "--repeat", "5", "--json"], stdout=out.file, check=True)
            out.file.flush()
            out.file.seek(0)
            d = json.load(out.file)
            out.file.seek(0)
            out.file.truncate()
            assert d["verified"], "wrong result: %s %s %s %s" % (binary, shape, src, dst)
            ms[name] = d["seconds"] * 1e3
        rows.append((ms["B"] / ms["A"], shape, dtype, src, dst, ms["A"], ms["B"]))
print("seed %d, %d cases, one run each, 2 threads" % (seed, len(rows)))
print("| B/A | shape | dtype | from | to | A ms | B ms |")
print("|---|---|---|---|---|---|---|")
for r in sorted(rows, reverse=True):
    print("| %.2f | %s | %s | `%s` | `%s` | %.2f | %.2f |" % r)
PY
