#!/usr/bin/env python3
"""Runs a reshard command and its plain-text form, and fails unless the
command's peak memory (the child's maximum resident set, from wait4) and
wall time stay within a factor of the text form's, plus some slack.

  check_memory.py --reshard build/reshard [--ratio 2] [--slack-mb 48] [--slack-s 1.5]
                  [--exit N] [--max-mb M] -- ARGS... [--- TEXT_ARGS...]

ARGS are the command's arguments (after `reshard`); TEXT_ARGS, after `---`,
those of the form it is compared with (absent: only --max-mb applies). Both
write to /dev/null, since what is measured is the memory it takes to produce
the output, not to keep it. --exit is the command's expected exit status
(default 0): a refusal up front (status 2) must stay under --max-mb too.
Guards the sizes of issue "Hardening" (items 1 to 3): JSON built whole in
memory took 20 times its output.
"""
import argparse
import os
import subprocess
import sys
import time


def measure(argv):
    """(exit status, peak RSS in MB, wall seconds, stderr) of running argv."""
    start = time.monotonic()
    with open(os.devnull, "wb") as null:
        p = subprocess.Popen(argv, stdout=null, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(p.pid, 0)
        err = p.stderr.read().decode("utf-8", "replace")
        p.stderr.close()
        p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, usage.ru_maxrss / 1024.0, time.monotonic() - start, err


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit("usage: check_memory.py [options] -- ARGS... [--- TEXT_ARGS...]")
    split = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("--reshard", required=True)
    ap.add_argument("--ratio", type=float, default=2.0)
    ap.add_argument("--slack-mb", type=float, default=48.0)
    ap.add_argument("--slack-s", type=float, default=1.5)
    ap.add_argument("--exit", type=int, default=0)
    ap.add_argument("--max-mb", type=float, default=None)
    opts = ap.parse_args(argv[:split])
    rest = argv[split + 1:]
    args, text_args = (rest[:rest.index("---")], rest[rest.index("---") + 1:]) if "---" in rest else (rest, None)

    code, mb, secs, err = measure([opts.reshard] + args)
    print("command: exit %d, %.1f MB, %.2f s: reshard %s" % (code, mb, secs, " ".join(args)))
    failures = []
    if code != opts.exit:
        failures.append("exit %d, expected %d: %s" % (code, opts.exit, err.strip()[:500]))
    if opts.max_mb is not None and mb > opts.max_mb:
        failures.append("%.1f MB is over the ceiling of %.1f MB" % (mb, opts.max_mb))
    if text_args is not None:
        tcode, tmb, tsecs, terr = measure([opts.reshard] + text_args)
        print("text form: exit %d, %.1f MB, %.2f s: reshard %s" % (tcode, tmb, tsecs, " ".join(text_args)))
        if tcode != 0:
            failures.append("the text form exited %d: %s" % (tcode, terr.strip()[:500]))
        if mb > opts.ratio * tmb + opts.slack_mb:
            failures.append("%.1f MB is more than %.1fx the text form's %.1f MB + %.0f MB" % (
                mb, opts.ratio, tmb, opts.slack_mb))
        if secs > opts.ratio * tsecs + opts.slack_s:
            failures.append("%.2f s is more than %.1fx the text form's %.2f s + %.1f s" % (
                secs, opts.ratio, tsecs, opts.slack_s))
    for f in failures:
        print("FAILED: " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
