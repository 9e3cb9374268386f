"""Whether every protocol declared "before the runs" was committed before its records' results,
read from the git history: ``python -m experiments.history`` (exit 1 and one line a problem).

A protocol ``experiments/protocols/NAME.toml`` with ``before_runs = true`` covers the records named
NAME and those the campaign's queue runs under it (``protocol = "NAME"``); their results are
``experiments/results/RECORD.json`` and the ledger ``experiments/results/runs/RECORD/``. Every commit
that changed the protocol must be an ancestor of, and not be, the first commit that added any of
those results, and must be older than the first line of every ledger run's ``metrics.jsonl``
(written as the run starts), since results may wait uncommitted while runs go on; a protocol
changed in the working tree while results exist is a problem too. A shallow clone lacks the
history: ``shallow`` says so and nothing is checked.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)


def _records(root: Path, name: str) -> list[str]:
    """The records whose protocol is ``name``: itself and the queue's entries that name it."""
    queue = root / "experiments" / "campaign.toml"
    entries = tomllib.loads(queue.read_text()).get("entry", []) if queue.exists() else []
    return sorted({name} | {e["record"] for e in entries if e.get("protocol", e["record"]) == name})


def shallow(root: Path) -> bool:
    return _git(root, "rev-parse", "--is-shallow-repository").stdout.strip() == "true"


def _first_start(root: Path, records: list[str]) -> float | None:
    """The earliest first-line time of the records' ledger runs (their starts), None if none."""
    times = []
    for record in records:
        for metrics in (root / "experiments" / "results" / "runs" / record).glob("*/metrics.jsonl"):
            with metrics.open() as lines:
                first = lines.readline()
            if first:
                times.append(json.loads(first)["time"])
    return min(times, default=None)


def problems(root: Path) -> list[str]:
    """One line per protocol committed after (or changed since) its records' first results."""
    found = []
    for path in sorted((root / "experiments" / "protocols").glob("*.toml")):
        if not tomllib.loads(path.read_text()).get("before_runs"):
            continue
        protocol = str(path.relative_to(root))
        results = [file for record in _records(root, path.stem)
                   for file in (f"experiments/results/{record}.json", f"experiments/results/runs/{record}/")]
        first = _git(root, "log", "--reverse", "--format=%H", "--", *results).stdout.split()
        declared = _git(root, "log", "--format=%H", "--", protocol).stdout.split()
        started = _first_start(root, _records(root, path.stem))
        if declared and started is not None:
            committed = int(_git(root, "log", "-1", "--format=%ct", "--", protocol).stdout.strip())
            if started <= committed:
                found.append(f"{protocol}: last changed at {committed}, after a run of its records started "
                             f"({started:.0f})")
        if not first:
            if started is not None and (not declared or _git(root, "status", "--porcelain", "--", protocol).stdout):
                found.append(f"{protocol}: runs have started but the protocol is not committed as it is")
            continue
        if not declared:
            found.append(f"{protocol}: results committed ({first[0][:10]}) but the protocol never was")
            continue
        for commit in declared:
            if commit == first[0] or _git(root, "merge-base", "--is-ancestor", commit, first[0]).returncode != 0:
                found.append(f"{protocol}: changed in {commit[:10]}, not before the first results ({first[0][:10]})")
        if _git(root, "status", "--porcelain", "--", protocol).stdout.strip():
            found.append(f"{protocol}: changed in the working tree after its results were committed")
    return found


def main() -> int:
    root = Path(__file__).resolve().parents[1]
    if _git(root, "rev-parse", "--git-dir").returncode != 0:
        print(f"{root} is not a git checkout: the order of commits cannot be checked", file=sys.stderr)
        return 1
    if shallow(root):
        print(f"{root} is a shallow clone: the history that orders protocols and results is missing",
              file=sys.stderr)
        return 1
    found = problems(root)
    for line in found:
        print(line, file=sys.stderr)
    if not found:
        print("every protocol declared before the runs was committed before its results")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
