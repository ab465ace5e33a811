#!/usr/bin/env python3
"""Runs every example in the docs and diffs its output (style: nlohmann's
check_output). An example is a `$ reshard ...` line inside a ```console block;
the lines after it, up to the next `$ ` line or the block's end, are the
expected stdout followed by stderr, and a last line `[exit N]` is the exit
status (absent: 0).

  check_doc_examples.py --reshard build/reshard docs/*.md docs/notations/*.md

With --update, every example that differs has its expected lines replaced in
place by what the command printed (same format: output, then `[exit N]` when
nonzero). Read the changed examples afterwards: the prose around them may
need the same change.
"""
import argparse
import os
import subprocess
import sys
import tempfile


def examples(lines):
    """Yields (first, end, cmd, expected): lines[first:end] are the expected
    lines of the example whose `$ ` line is lines[first - 1]."""
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```console":
            i += 1
            continue
        i += 1
        start = i
        while i < len(lines) and lines[i].strip() != "```":
            i += 1
        j = start
        while j < i:
            if not lines[j].startswith("$ "):
                j += 1
                continue
            cmd = lines[j][2:]
            j += 1
            first = j
            while j < i and not lines[j].startswith("$ "):
                j += 1
            end = j
            while end > first and lines[end - 1] == "":
                end -= 1
            yield first, end, cmd, lines[first:end]


def run(cmd, bindir):
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, cwd=bindir, timeout=120)
    out = p.stdout + p.stderr
    got = out.rstrip("\n").split("\n") if out.strip("\n") else []
    if p.returncode != 0:
        got.append("[exit %d]" % p.returncode)
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reshard", required=True)
    ap.add_argument("--update", action="store_true",
                    help="rewrite each differing example's expected output in place")
    ap.add_argument("docs", nargs="+")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as bindir:
        os.symlink(os.path.abspath(args.reshard), os.path.join(bindir, "reshard"))
        passed = failed = updated = 0
        for doc in args.docs:
            lines = open(doc, encoding="utf-8").read().split("\n")
            changes = []  # (first, end, new lines), in file order
            for first, end, cmd, expected in examples(lines):
                got = run(cmd, bindir)
                if got == expected:
                    passed += 1
                    continue
                if args.update:
                    changes.append((first, end, got))
                    print("%s:%d: updated:\n  $ %s" % (doc, first, cmd))
                    continue
                failed += 1
                print("%s: example differs:\n  $ %s" % (doc, cmd))
                for line in expected:
                    print("  - " + line)
                for line in got:
                    print("  + " + line)
            if changes:
                for first, end, got in reversed(changes):
                    lines[first:end] = got
                with open(doc, "w", encoding="utf-8") as f:
                    f.write("\n".join(lines))
                updated += len(changes)
    if args.update:
        print("%d passed, %d updated" % (passed, updated))
        return 0 if passed + updated else 1
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
