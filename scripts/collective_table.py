#!/usr/bin/env python3
"""The corpus table: reshard's collective plans against the baselines and XLA.

For every case of tests/data/collective_cases.tsv (columns: name shape mesh
devices from to jax origin) this runs

    build/reshard plan <args> --json                               (default model, target any)
    build/reshard plan <args> --json --for jax-cpu --bandwidth-only  (the plan the JAX tests emit)

and collects, from the first: our plan's max_recv_bytes, its steps' ops and
modeled_time_us; the lower bound; the baselines full_rematerialization and
shardy (max_recv_bytes, ops, modeled_time_us); from the second: the jax-cpu
plan's max_recv_bytes and ops. With --jax-summary PATH (a JSON written by

    RESHARD_JAX_SUMMARY=PATH tests/jax/run_jax_tests.sh -k test_emitted_jax

) it adds, per jax=1 case, the bytes one device receives in XLA's compiled
with_sharding_constraint program and in our compiled emitted program, with
both programs' collectives (tests/jax/hlo_bytes.py counts them).

Prints a markdown table, one row per case, then a summary: compiled bytes
ours vs XLA (strictly less / equal / more), the default plan vs the
Shardy-style and rematerialization baselines under the cost model, and the
plans that meet the lower bound. Exits 1 if any case's compiled bytes exceed
XLA's or a plan command fails (a jax-cpu plan refused with exit 1, because
only the ragged exchange can move that data, is listed, not a failure).

    python3 scripts/collective_table.py [--cli build/reshard] [--cases PATH] [--jax-summary PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLUMNS = ["name", "shape", "mesh", "devices", "from", "to", "jax", "origin"]

# Short names for ops in the table (legend printed under it).
ABBREV = {
    "all-to-all": "a2a", "all-gather": "ag", "collective-permute": "cp", "exchange": "exch",
    "slice": "slice", "pad": "pad", "copy": "copy", "all-reduce": "ar", "reduce-scatter": "rs",
    "ragged-all-to-all": "ragged-a2a", "collective-broadcast": "bcast",
}


def load_cases(path: str) -> list[dict]:
    """The corpus rows as dicts keyed by COLUMNS, read by tests/jax/corpus.py."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "jax"))
    import corpus  # noqa: E402 (the one reader of the corpus)
    return [dict(zip(COLUMNS, (c.name, c.shape, c.mesh, c.devices, c.src, c.dst, "1" if c.jax else "0", c.origin)))
            for c in corpus.load_cases(path)]


def case_args(c: dict) -> list[str]:
    args = ["--shape", c["shape"]]
    if c["mesh"]:
        args += ["--mesh", c["mesh"]]
    if c["devices"]:
        args += ["--devices", c["devices"]]
    return args + ["--from", c["from"], "--to", c["to"]]


def device_count(plan: dict | None) -> str:
    if plan and "devices" in plan:
        return str(plan["devices"])
    return "?"


def run_plan(cli: str, c: dict, extra: list[str]) -> tuple[dict | None, str, int]:
    """(plan JSON or None, error text, exit code)."""
    cmd = [cli, "plan"] + case_args(c) + ["--json"] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        lines = (r.stderr or r.stdout).strip().splitlines()
        return None, "exit %d: %s" % (r.returncode, lines[-1] if lines else ""), r.returncode
    return json.loads(r.stdout), "", 0


def ops(names) -> str:
    names = list(names)
    if not names:
        return "none"
    return ", ".join(ABBREV.get(n, n) for n in names)


def step_ops(plan: dict) -> list[str]:
    return [s["op"] for s in plan.get("steps", [])]


def us(x) -> str:
    if x is None:
        return ""
    return "%.1f" % x


def cmp(a: float, b: float, rel: float = 1e-9) -> int:
    """-1, 0, 1: a less than, equal to (within rel), greater than b."""
    if abs(a - b) <= rel * max(abs(a), abs(b), 1e-12):
        return 0
    return -1 if a < b else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "reshard"))
    ap.add_argument("--cases", default=os.path.join(ROOT, "tests", "data", "collective_cases.tsv"))
    ap.add_argument("--jax-summary", help="JSON from RESHARD_JAX_SUMMARY=PATH tests/jax/run_jax_tests.sh -k test_emitted_jax")
    a = ap.parse_args()

    jax = {}
    if a.jax_summary:
        with open(a.jax_summary) as f:
            jax = {c["name"]: c for c in json.load(f)["cases"]}

    cases = load_cases(a.cases)
    rows = []
    failures = []
    no_jax_plan = []  # jax-cpu cannot move the data (exit 1)
    over_cap = {"full_rematerialization": [], "shardy": []}  # baseline over the memory cap, cheaper than ours
    for c in cases:
        plan, err, _ = run_plan(a.cli, c, [])
        jplan, jerr, jrc = run_plan(a.cli, c, ["--for", "jax-cpu", "--bandwidth-only"])
        rows.append((c, plan, err, jplan, jerr, jax.get(c["name"])))
        if err:
            failures.append("%s (default): %s" % (c["name"], err))
        if jerr and jrc != 1:  # exit 1: a valid request jax-cpu cannot meet (no ragged exchange)
            failures.append("%s (jax-cpu, bandwidth-only): %s" % (c["name"], jerr))
        elif jerr:
            no_jax_plan.append(c["name"])

    hdr = ["case", "devices", "lower bound B",
           "ours B", "ours ops", "ours us",
           "remat B", "remat ops", "remat us",
           "shardy B", "shardy ops", "shardy us",
           "jax-cpu B", "jax-cpu ops",
           "XLA compiled B", "XLA collectives", "ours compiled B", "ours compiled collectives"]
    out = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]

    compiled = {-1: [], 0: [], 1: []}
    vs_shardy = {-1: [], 0: [], 1: []}
    vs_remat = {-1: [], 0: [], 1: []}
    bytes_vs_shardy = {-1: [], 0: [], 1: []}
    meets_bound, jax_meets_bound, compiled_meets_bound = [], [], []
    planned, jplanned, with_jax = 0, 0, 0
    compiled_vs_plan = []  # compiled bytes differ from the jax-cpu plan's max_recv_bytes
    jax_missing = []

    for c, plan, err, jplan, jerr, js in rows:
        name = c["name"]
        cells = [name, device_count(plan or jplan)]
        if plan:
            planned += 1
            st, bl, lb = plan["stats"], plan["baselines"], plan["lower_bound"]["max_recv_bytes"]
            cells += [str(lb), str(st["max_recv_bytes"]), ops(step_ops(plan)), us(st["modeled_time_us"])]
            for key, tally in (("full_rematerialization", vs_remat), ("shardy", vs_shardy)):
                b = bl.get(key)
                if b is None:  # the planner prices only the baselines that apply
                    cells += ["n/a", "", ""]
                    continue
                fits = b["peak_bytes"] <= plan["memory_cap_bytes"]
                cells += [str(b["max_recv_bytes"]), ops(b["ops"]), us(b["modeled_time_us"]) + ("" if fits else " (over cap)")]
                order = cmp(st["modeled_time_us"], b["modeled_time_us"])
                tally[order].append(name)
                if order > 0 and not fits:
                    over_cap[key].append(name)
                if key == "shardy":
                    bytes_vs_shardy[cmp(st["max_recv_bytes"], b["max_recv_bytes"], 0)].append(name)
            if st["max_recv_bytes"] == lb:
                meets_bound.append(name)
        else:
            cells += ["", "error: " + err.replace("|", "\\|")] + [""] * 8
        if jplan:
            jplanned += 1
            cells += [str(jplan["stats"]["max_recv_bytes"]), ops(step_ops(jplan))]
            if jplan["stats"]["max_recv_bytes"] == jplan["lower_bound"]["max_recv_bytes"]:
                jax_meets_bound.append(name)
        else:
            cells += ["no plan" if name in no_jax_plan else "error: " + jerr.replace("|", "\\|"), ""]
        if js and "xla_bytes" in js:
            xb = js["xla_bytes"]
            cells += [str(xb), ops(x["op"] for x in js.get("xla_collectives", []))]
            if "ours_bytes" in js:
                with_jax += 1
                ob = js["ours_bytes"]
                cells += [str(ob), ops(x["op"] for x in js.get("ours_collectives", []))]
                compiled[cmp(ob, xb, 0)].append(name)
                if plan and ob == plan["lower_bound"]["max_recv_bytes"]:
                    compiled_meets_bound.append(name)
                if jplan and ob != jplan["stats"]["max_recv_bytes"]:
                    compiled_vs_plan.append("%s (compiled %s B, plan %s B)" % (name, ob, jplan["stats"]["max_recv_bytes"]))
            else:
                cells += ["error: " + str(js.get("error", "no result")).replace("|", "\\|")[:80], ""]
                jax_missing.append(name)
        else:
            if c["jax"] == "1" and a.jax_summary:
                jax_missing.append(name)
            cells += ["", "", "", ""]
        out.append("| " + " | ".join(cells) + " |")

    def names(xs, limit=12):
        if not xs:
            return ""
        return " (" + ", ".join(xs[:limit]) + (", ..." if len(xs) > limit else "") + ")"

    print("\n".join(out))
    print()
    print("Ops: a2a all-to-all, ag all-gather, cp collective-permute, exch ragged exchange (all-to-all-v), "
          "slice/pad/copy local steps, ar all-reduce. B: bytes into the busiest device; us: modeled time "
          "(default flat model). jax-cpu: `--for jax-cpu --bandwidth-only`, the plan the JAX tests emit.")
    print()
    print("Summary (%d cases, %d planned under the default model, %d under jax-cpu bandwidth-only):" %
          (len(rows), planned, jplanned))
    print()
    if a.jax_summary:
        print("- compiled bytes per device, ours vs XLA's (%d jax=1 cases compiled): strictly less %d, equal %d, more %d%s" %
              (with_jax, len(compiled[-1]), len(compiled[0]), len(compiled[1]), names(compiled[1])))
        if jax_missing:
            print("- jax=1 cases without a compiled result: %d%s" % (len(jax_missing), names(jax_missing)))
        print("- compiled bytes at the lower bound: %d of %d" % (len(compiled_meets_bound), with_jax))
        print("- compiled bytes differ from the jax-cpu plan's max_recv_bytes: %d%s" %
              (len(compiled_vs_plan), names(compiled_vs_plan, 20)))
    def total(t):
        return len(t[-1]) + len(t[0]) + len(t[1])
    def slower(t, key):
        s = "%d%s" % (len(t[1]), names(t[1]))
        if t[1] and len(over_cap[key]) == len(t[1]):
            s += "; in each the baseline's peak exceeds the memory cap"
        elif over_cap[key]:
            s += "; %d with the baseline over the memory cap" % len(over_cap[key])
        return s
    print("- default plan vs Shardy-style baseline, modeled time (%d cases priced it): faster %d, equal %d, slower %s" %
          (total(vs_shardy), len(vs_shardy[-1]), len(vs_shardy[0]), slower(vs_shardy, "shardy")))
    print("- default plan vs Shardy-style baseline, bytes into the busiest device: fewer %d, equal %d, more %d%s" %
          (len(bytes_vs_shardy[-1]), len(bytes_vs_shardy[0]), len(bytes_vs_shardy[1]), names(bytes_vs_shardy[1])))
    print("- default plan vs full rematerialization, modeled time (%d cases priced it): faster %d, equal %d, slower %s" %
          (total(vs_remat), len(vs_remat[-1]), len(vs_remat[0]), slower(vs_remat, "full_rematerialization")))
    missed = [r[0]["name"] for r in rows if r[1] and r[0]["name"] not in meets_bound]
    print("- default plan at the lower bound (max_recv_bytes == bound): %d of %d%s" % (len(meets_bound), planned,
          "; above it: " + ", ".join(missed) if missed else ""))
    print("- jax-cpu bandwidth-only plan at the lower bound: %d of %d" % (len(jax_meets_bound), jplanned))
    if no_jax_plan:
        print("- no jax-cpu plan (exit 1: only the ragged exchange moves the data): %d%s" % (len(no_jax_plan), names(no_jax_plan)))
    if failures:
        print("- plan commands that failed: %d%s" % (len(failures), names(failures, 20)))
    return 1 if failures or compiled[1] else 0


if __name__ == "__main__":
    sys.exit(main())
