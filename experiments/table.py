"""Write the table of ``REPRODUCTION.md`` from the scripts' JSON records, so that every number in
it is one a script wrote: ``python -m experiments.table`` (``--check``: exit 1 if the file's
table differs from the records'; ``--reword``: first give every record the verdict its script
words today from the record's own results, after a change to a verdict rule).
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

from experiments import common

DOCUMENT = Path(__file__).parent / "REPRODUCTION.md"
BEGIN, END = "<!-- table: written by python -m experiments.table -->", "<!-- end of table -->"
COLUMNS = ("claim", "the seed reports", "measured here", "verdict", "protocol", "command", "model", "training",
           "seeds", "time", "machine", "the seed's size (GPU)")


def load(results: Path = common.RESULTS) -> list[dict]:
    """The records of ``results/*.json``, in claim order, a claim's records by name (the same order
    on every checkout: a folder's listing order is the file system's)."""
    records = [json.loads(path.read_text()) for path in results.glob("*.json")]
    return sorted(records, key=lambda r: (int(r["claim"].split(".")[0]), r["name"]))


def verdict(record: dict) -> str:
    """The verdict the record's script (the module its command runs) words today from the record's
    own results."""
    script = importlib.import_module(record["command"].split()[2])
    return script.verdict(record["results"], record["size"] == "full")


def reword(results: Path = common.RESULTS) -> list[str]:
    """Rewrite the ``verdict`` of every record in ``results`` that its script now words otherwise;
    the names of the records changed."""
    changed = []
    for path in sorted(results.glob("*.json")):
        record = json.loads(path.read_text())
        if record["verdict"] != verdict(record):
            record["verdict"] = verdict(record)
            path.write_text(json.dumps(record, indent=1) + "\n")
            changed.append(record["name"])
    return changed


def protocol_note(record: dict) -> str:
    """When the record's protocol was declared: before its runs (the file committed first, which
    the tests check), after them, or not at all (records made before protocols were kept)."""
    declared = record.get("protocol")
    if declared is None:
        return "none declared (the record predates protocols)"
    when = "before the runs" if declared.get("before_runs") else "after the runs"
    return f"declared {when}, {declared.get('declared', '')}: experiments/protocols/{declared['name']}.toml"


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(records: list[dict]) -> str:
    """The markdown table of the records, one row per claim."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in records:
        time_spent = f"{r['train_min']} min of training ({r['jobs']} at once), {r['wall_min']} min wall (last call)"
        cells = (r["claim"], r["seed"], r["ours"], r["verdict"], protocol_note(r), f"`{r['command']}`", r["model"],
                 r["epochs"], r["seeds"],
                 time_spent, f"{r['machine']}, {r['date']}", f"`{r['gpu']}`")
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def bins_table(rows: list[dict], seed: dict) -> str:
    """The PTB record's test perplexity by frequency bin, with the paired difference and both
    intervals (the authors' ~99.9% and the 95% percentile), as ``tsrnn eval`` prints them, beside
    the seed's Table 1 (LSTM, MTS, difference, 95% CI)."""
    lines = ["| bin | targets | LSTM | MTS | LSTM - MTS | authors' interval (~99.9%) | 95% interval | the seed: "
             "LSTM, MTS, LSTM - MTS [95% CI] |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        base, mts, diff, (low, high) = seed[r["bin"]]
        theirs = f"{base}, {mts}, {diff} [{low}, {high}]"
        if not r["tokens"]:
            lines.append(f"| {r['bin']} | 0 | no target word occurs this often | | | | | {theirs} |")
            continue
        lines.append(f"| {r['bin']} | {r['tokens']} | {r['baseline_ppl']:.2f} | {r['ppl']:.2f} | {r['diff']:.2f} | "
                     f"[{r['diff_low']:.2f}, {r['diff_high']:.2f}] | [{r['diff_low95']:.2f}, {r['diff_high95']:.2f}] "
                     f"| {theirs} |")
    return "\n".join(lines)


def render_all(records: list[dict]) -> str:
    """The claims' table, then each record's own table (``detail``) and the PTB frequency-bin
    table when its record is there."""
    parts = [render(records)]
    for r in records:
        if "detail" in r:
            number = r["claim"].split(".")[0]
            parts.append(f"Claim {number}, every number behind it (`{r['command']}`):\n\n{r['detail']}")
        if r["name"] == "ptb_lm":
            parts.append(f"Claim 5, test perplexity by word frequency of the first training seed's models, with "
                         f"its test-set bootstrap (`{r['command']}`):\n\n"
                         + bins_table(r["results"]["table"], r["results"]["seed_table"]["bins"]))
    return "\n\n".join(parts)


def with_table(document: str, table: str) -> str:
    """``document`` with the text between BEGIN and END replaced by ``table``."""
    head, _, rest = document.partition(BEGIN)
    _, _, tail = rest.partition(END)
    if not rest or END not in rest:
        raise ValueError(f"{DOCUMENT.name} lacks the markers {BEGIN!r} ... {END!r}")
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if REPRODUCTION.md's table is not the records'")
    p.add_argument("--reword", action="store_true", help="first rewrite each record's verdict by its script's rule")
    args = p.parse_args(argv)
    if args.reword:
        print(f"reworded the verdicts of: {', '.join(reword()) or 'no record'}")
    document = DOCUMENT.read_text()
    updated = with_table(document, render_all(load()))
    if args.check:
        if updated != document:
            print(f"{DOCUMENT} is out of date: run python -m experiments.table", file=sys.stderr)
            return 1
        return 0
    DOCUMENT.write_text(updated)
    print(f"wrote the table of {len(load())} claims into {DOCUMENT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
