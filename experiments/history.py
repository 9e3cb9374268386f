"""Whether every protocol declared "before the runs" was committed before its records' results,
read from the git history: ``python -m experiments.history`` (exit 1 and one line a problem).

A protocol ``experiments/protocols/NAME.toml`` with ``before_runs = true`` covers the records named
NAME and those the campaign's queue runs under it (``protocol = "NAME"``); their results are
``experiments/results/RECORD.json`` and the ledger ``experiments/results/runs/RECORD/``. Every commit
that changed the protocol must be an ancestor of, and not be, the first commit that added any of
those results; a protocol changed in the working tree while results are committed is a problem too.
"""
from __future__ import annotations

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
        if not first:
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
    found = problems(root)
    for line in found:
        print(line, file=sys.stderr)
    if not found:
        print("every protocol declared before the runs was committed before its results")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
