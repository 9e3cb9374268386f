"""Runs the emulation's table in a process of its own, for the variants that cannot share the
tests' process: the sanitized library (the ASan runtime must be preloaded) and the planted-bug
libraries (one library per process).

    python tests/simt/run.py LIBRARY SEED [SEED ...] [--match TEXT]

prints one JSON line per case of ``emulation.table(seeds)``, the padded cases then the packed
ones (those whose id contains TEXT): its id, whether it passed, and its failures; the exit status
is 0 when every case ran (passed or not), so a sanitizer's report, which ends the process, is
told apart from a numerical failure.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from simt import emulation  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("library")
    parser.add_argument("seeds", type=int, nargs="+")
    parser.add_argument("--match", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)
    emulation.load(args.library)
    for case in (c for c in emulation.table(args.seeds) if args.match in c.id):
        result = emulation.check_packed(case) if isinstance(case, emulation.PackedCase) else emulation.check(case)
        print(json.dumps({"case": case.id, "ok": result.ok, "failures": result.failures()}), flush=True)


if __name__ == "__main__":
    main()
