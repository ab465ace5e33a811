"""Plans of two reshard builds side by side on random partial-sum pairs into
partial targets over fewer axes (docs/cost_model.md, "Parts moved alike"):
f32[32,32] on mesh x=2,y=2,z=2, a random spec per side, the target's
unreduced axes a strict subset of the source's; each pair planned by both
builds under the default model and --bandwidth-only. Counts the plans the
new build models faster and slower, and lists the slower ones.

  python3 bench/compare_partial_plans.py OLD/build/reshard build/reshard [--seed 2] [--draws 3000]
"""
import argparse
import random
import re
import subprocess

AXES = ["x", "y", "z"]


def draw(rng):
    """A random two-dim spec over the axes, and its unreduced axes (some of those it leaves free)."""
    dims, used = [[], []], []
    for a in rng.sample(AXES, len(AXES)):
        r = rng.random()
        if r < 0.6:
            dims[0 if r < 0.3 else 1].append(a)
            used.append(a)
    unreduced = [a for a in AXES if a not in used and rng.random() < 0.7]
    text = lambda l: "None" if not l else ("'%s'" % l[0] if len(l) == 1 else "(%s)" % ",".join("'%s'" % a for a in l))
    extra = ", unreduced={%s}" % ",".join("'%s'" % a for a in unreduced) if unreduced else ""
    return "P(%s, %s%s)" % (text(dims[0]), text(dims[1]), extra), set(unreduced)


def modeled(binary, source, target, model):
    r = subprocess.run([binary, "plan", "--shape", "32,32", "--dtype", "f32", "--mesh", "x=2,y=2,z=2", "--from", source,
                        "--to", target] + model, capture_output=True, text=True)
    m = re.search(r"^plan: +max recv (\d+) B.*?, ([\d.]+) us modeled", r.stdout, re.M)
    return (float(m.group(2)), int(m.group(1))) if m else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--draws", type=int, default=3000)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    pairs = faster = slower = 0
    for _ in range(args.draws):
        (source, su), (target, tu) = draw(rng), draw(rng)
        if not su or not tu or not tu < su:
            continue
        pairs += 1
        for model in ([], ["--bandwidth-only"]):
            old, new = modeled(args.old, source, target, model), modeled(args.new, source, target, model)
            if not old or not new:
                continue
            if new[0] < old[0] - 1e-9:
                faster += 1
            if new[0] > old[0] + 1e-9:
                slower += 1
                print("slower %s: %s -> %s: %.2f us, %d B against %.2f us, %d B" % (
                    " ".join(model) or "default", source, target, new[0], new[1], old[0], old[1]))
    print("%d pairs, two models each: %d plans modeled faster, %d slower" % (pairs, faster, slower))


if __name__ == "__main__":
    main()
