#!/usr/bin/env python3
"""Runs every example in the docs and diffs its output (style: nlohmann's
check_output). An example is a `$ reshard ...` line inside a ```console block;
the lines after it, up to the next `$ ` line or the block's end, are the
expected stdout followed by stderr, and a last line `[exit N]` is the exit
status (absent: 0).

  check_doc_examples.py --reshard build/reshard docs/*.md docs/notations/*.md
"""
import argparse
import os
import subprocess
import sys
import tempfile


def examples(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```console":
            i += 1
            continue
        i += 1
        block = []
        while i < len(lines) and lines[i].strip() != "```":
            block.append(lines[i])
            i += 1
        j = 0
        while j < len(block):
            if not block[j].startswith("$ "):
                j += 1
                continue
            cmd, line_no = block[j][2:], j
            j += 1
            expected = []
            while j < len(block) and not block[j].startswith("$ "):
                expected.append(block[j])
                j += 1
            while expected and expected[-1] == "":
                expected.pop()
            yield line_no, cmd, expected


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
    ap.add_argument("docs", nargs="+")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as bindir:
        os.symlink(os.path.abspath(args.reshard), os.path.join(bindir, "reshard"))
        passed = failed = 0
        for doc in args.docs:
            for _, cmd, expected in examples(doc):
                got = run(cmd, bindir)
                if got == expected:
                    passed += 1
                    continue
                failed += 1
                print("%s: example differs:\n  $ %s" % (doc, cmd))
                for line in expected:
                    print("  - " + line)
                for line in got:
                    print("  + " + line)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
