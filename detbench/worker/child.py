"""The one main of every detbench child process: ``python -m detbench.worker.child``.

The protocol, with every child that speaks it, is described in ``detbench.worker.protocol``.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys

from detbench.worker.protocol import ARMED_NAME, Channel, die_with_parent, read_job, resolve


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m detbench.worker.child")
    parser.add_argument("--job", default="-")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--out")
    where.add_argument("--fd", type=int)
    parser.add_argument("--parent", type=int)
    args = parser.parse_args(argv)
    # Before the imports (seconds, with torch): a parent that dies meanwhile takes this child
    # with it. The name says so where the runner reads it without a message (see the protocol).
    die_with_parent(args.parent, name=ARMED_NAME)
    # On SIGSEGV, SIGABRT, SIGFPE or SIGBUS, Python's stack goes to stderr (the child's log).
    faulthandler.enable()
    job = read_job(args.job)
    out = Channel.open(args.out, args.fd)
    try:
        return resolve(job["kind"])(job, out)
    finally:
        out.close()


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # Everything is sent: skip the interpreter's teardown of torch (about a second on a CPU).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
