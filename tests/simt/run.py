"""Runs the emulation's table in a process of its own, for the runs that cannot share the tests'
process: the sanitized library (the ASan runtime must be preloaded) and the planted bugs (a
dropped barrier or broken atomics, set once for the whole process).

    python tests/simt/run.py LIBRARY SEED [SEED ...] --kernel cluster|grid [--match TEXT ...]
                             [--drop FILE:LINE] [--plant NAME] [--until-failure]
    python tests/simt/run.py LIBRARY SEED [SEED ...] --probes NAME [NAME ...] [--plant NAME]

prints one JSON line per case of ``cluster.table(seeds, kernel)`` (a tensor-core kernel's table,
the padded cases then the packed ones) whose id contains one of the TEXTs: its id, whether it
passed, and its failures (--until-failure: up to the first case that fails, all a planted bug's
test needs to see); the exit status
is 0 when every case ran (passed or not), so a sanitizer's report, which ends the process, is
told apart from a numerical failure. ``run_table`` runs it from the tests. With --probes it runs
the emulation's own probes instead (``torch.ops.simt.probe``), one JSON line per probe and seed
with what it returned (``run_probes``). --drop turns the barrier on LINE of the kernel source
file whose path ends with FILE into a no-op (torch.ops.simt.drop_barrier; a drop that no barrier
call met is an error, exit status 3), --plant breaks the emulation's atomics ("flag_early",
"skip_arrive": torch.ops.simt.plant), both after the library is loaded and before anything runs.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from simt import cluster, emulation  # noqa: E402


def _bugs(drop: str | None = None, plant: str = "") -> list[str]:
    return [*(["--drop", drop] if drop else []), *(["--plant", plant] if plant else [])]


def run_table(library: Path, seeds, kernel: str, match=("",), env=None, drop: str | None = None, plant: str = "",
              until_failure: bool = False):
    """This script on ``library`` in a process of its own (``kernel``: the tensor-core kernel whose
    table runs, "cluster" or "grid"; ``drop``: "FILE:LINE", a barrier removed; ``plant``: broken
    atomics; ``until_failure``: stop after the first case that fails): (the finished process, its
    JSON rows)."""
    done = subprocess.run([sys.executable, __file__, str(library), *map(str, seeds), "--match", *match,
                           "--kernel", kernel, *_bugs(drop, plant), *(["--until-failure"] if until_failure else [])],
                          capture_output=True, text=True, env=env, timeout=1200)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done, rows


def run_probes(library: Path, names, seeds, env=None, plant: str = ""):
    """The probes ``names`` on ``library`` in a process of its own, for each seed (``plant``: with
    broken atomics): (the finished process, {(name, seed): what the probe returned})."""
    done = subprocess.run([sys.executable, __file__, str(library), *map(str, seeds), "--probes", *names,
                           *_bugs(plant=plant)], capture_output=True, text=True, env=env, timeout=600)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done, {(row["probe"], row["seed"]): row["result"] for row in rows}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("library")
    parser.add_argument("seeds", type=int, nargs="+")
    parser.add_argument("--match", nargs="+", default=[""])
    parser.add_argument("--kernel", choices=sorted(cluster.KERNELS), help="the tensor-core kernel whose table runs")
    parser.add_argument("--probes", nargs="+", default=[], help="the emulation's probes instead of a table")
    parser.add_argument("--drop", metavar="FILE:LINE", help="the barrier on LINE of the source file FILE removed")
    parser.add_argument("--plant", default="", choices=["", "flag_early", "skip_arrive"], help="broken atomics")
    parser.add_argument("--until-failure", action="store_true", help="stop the table after the first case that fails")
    args = parser.parse_args()
    if not args.probes and not args.kernel:
        parser.error("a table needs --kernel (cluster or grid); --probes runs the emulation's probes")
    drop = None
    if args.drop:
        file, _, line = args.drop.rpartition(":")
        if not file or not line.isdigit() or int(line) < 1:
            parser.error(f"--drop takes FILE:LINE (a line >= 1), got {args.drop!r}")
        drop = (file, int(line))
    torch.set_num_threads(1)
    emulation.load(args.library)
    if drop:
        torch.ops.simt.drop_barrier(*drop)
    torch.ops.simt.plant(args.plant)
    if args.probes:
        for name in args.probes:
            for seed in args.seeds:
                print(json.dumps({"probe": name, "seed": seed, "result": torch.ops.simt.probe(name, seed)}), flush=True)
    else:
        _table(args)
    if drop and torch.ops.simt.barrier_drops() == 0:
        print(f"simt: --drop {args.drop}: no barrier call on that line of that file ran", file=sys.stderr)
        sys.exit(3)


def _table(args) -> None:
    for case in (c for c in cluster.table(args.seeds, args.kernel) if any(text in c.id for text in args.match)):
        try:
            result = cluster.check(case)
            row = {"case": case.id, "ok": result.ok, "failures": result.failures()}
        except RuntimeError as exc:  # the emulation refused the launch (a barrier used out of order, ...)
            row = {"case": case.id, "ok": False, "failures": str(exc).splitlines()[0][:2000]}
        print(json.dumps(row), flush=True)
        if args.until_failure and not row["ok"]:
            break


if __name__ == "__main__":
    main()
