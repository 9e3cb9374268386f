"""Where a run's records go: ``OUT/metrics.jsonl`` always, a CSV file (``--csv FILE``) and a
TensorBoard log (``--tensorboard DIR``) when asked; the trainer writes each record once, to
``Loggers.write``, which fans it out (rank 0 only: the other processes write nothing).

- **metrics.jsonl** (``run_dir.Metrics``) is the run's own record: one JSON object a line, a
  non-finite number written as ``null`` (JSON has no NaN), cut back on a resume to the lines its
  checkpoint had seen. The other two are views of it.
- **CSV**, long format: ``time,event,step,epoch,name,value``, one row per number of a record
  (a "train" record of loss, lr, grad_norm and a rate gives four rows). The events carry different
  fields ("valid" has the task's metrics, "epoch" its seconds, "switch" a name), and a resumed run
  or a new task version may add some: a header made of the union of the fields would have to be
  rewritten whenever a new one appears, a fixed long header never is, and pandas turns it into
  one column per name with ``pivot``. A ``value`` is written as JSON would write it: numbers in
  full precision, ``null`` (a non-finite number) as an empty cell.
- **TensorBoard** (``torch.utils.tensorboard.SummaryWriter``): one scalar per number of a record,
  tagged ``EVENT/NAME`` (``train/loss``, ``train/lr``, ``train/grad_norm``, ``valid/accuracy``,
  ``epoch/epoch_s``, ...) at the record's optimizer step, with its wall time; a record's strings
  (the "switch" record's optimizer) and nulls (a non-finite number) are not scalars and are left out.

Both hold every record of metrics.jsonl, also across ``--resume``: the CSV is written again from
metrics.jsonl (as cut back to the checkpoint: no row twice, the header once) and then appended
to; a TensorBoard directory the run has written to before continues with ``purge_step`` at the
first step after the checkpoint (TensorBoard hides the events the interrupted process logged at
those steps), and a new one is first given the records of metrics.jsonl. A fresh run does not
write over a CSV file or a TensorBoard directory holding event files unless ``--overwrite``
(``destination_error``). Both are flushed at each epoch's end and each save of ``last.pt``, and
closed when the run ends, however it ends.
"""
from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

from tsrnn.lab.training import run_dir

CSV_HEADER = ("time", "event", "step", "epoch", "name", "value")
COORDINATES = ("time", "event", "step", "epoch")  # where a record is; its other fields are its values
TENSORBOARD_MISSING = "--tensorboard needs the tensorboard package: pip install tensorboard"


def tensorboard_installed() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


def _event_files(folder) -> list[Path]:
    folder = Path(folder)
    return sorted(folder.glob("events.out.tfevents.*")) if folder.is_dir() else []


def destination_error(args) -> str | None:
    """Why ``args.csv`` or ``args.tensorboard`` cannot take this run (one line), or None: TensorBoard
    is not installed, the CSV path is a directory, or a run that does not continue its records
    (a fresh run, a resume into another --out) would replace a non-empty CSV file or write beside
    another run's TensorBoard events, without --overwrite."""
    csv_path, board = getattr(args, "csv", None), getattr(args, "tensorboard", None)
    if board is not None and not tensorboard_installed():
        return TENSORBOARD_MISSING
    if board is not None and Path(board).exists() and not Path(board).is_dir():
        return f"--tensorboard {board} is an existing file; --tensorboard takes a directory (created if missing)"
    if csv_path is not None and Path(csv_path).is_dir():
        return f"--csv {csv_path} is a directory; --csv takes a file name"
    if run_dir.continues_here(args.out, args.resume) or getattr(args, "overwrite", False):
        return None
    if csv_path is not None and Path(csv_path).is_file() and Path(csv_path).stat().st_size:
        return (f"--csv {csv_path} holds another run's records; replace it with --overwrite or choose another "
                "--csv")
    if board is not None and _event_files(board):
        return (f"--tensorboard {board} holds another run's event files; replace them with --overwrite or choose "
                "another --tensorboard")
    return None


class CSVLog:
    """The long-format CSV of the records (see the module's docstring)."""

    def __init__(self, path, records: list[dict]):
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = path.open("w", newline="")
        self.writer = csv.writer(self.file)
        self.writer.writerow(CSV_HEADER)
        for record in records:
            self.write(record)

    def write(self, record: dict) -> None:
        where = [record.get(key, "") for key in COORDINATES]
        for name, value in record.items():
            if name not in COORDINATES:
                self.writer.writerow([*where, name, "" if value is None else value])

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class TensorBoardLog:
    """The records' numbers as TensorBoard scalars ``EVENT/NAME`` at their step."""

    def __init__(self, folder, records: list[dict], purge_step: int | None):
        from torch.utils.tensorboard import SummaryWriter

        fresh = not _event_files(folder)
        self.writer = SummaryWriter(str(folder), purge_step=None if fresh else purge_step)
        if fresh:
            for record in records:
                self.write(record)

    def write(self, record: dict) -> None:
        for name, value in record.items():
            if name in COORDINATES or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            self.writer.add_scalar(f"{record['event']}/{name}", value, global_step=record["step"],
                                   walltime=record.get("time"))

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class Loggers:
    """metrics.jsonl (``run_dir.Metrics``, whose record count a checkpoint keeps) and the optional
    CSV and TensorBoard logs; on a process other than rank 0 (``main`` False) nothing is written.
    ``step`` is the optimizer step the run starts from (the checkpoint's on a resume): TensorBoard
    purges the events logged after it."""

    def __init__(self, out, args, main: bool = True, step: int = 0):
        self.metrics = run_dir.Metrics(Path(out) / "metrics.jsonl" if main else None)
        self.active = main
        self.views = []
        if not main:
            return
        if getattr(args, "csv", None) or getattr(args, "tensorboard", None):
            records = self.read_metrics()
        if getattr(args, "csv", None):
            self.views.append(CSVLog(args.csv, records))
        if getattr(args, "tensorboard", None):
            if getattr(args, "overwrite", False) and not run_dir.continues_here(out, getattr(args, "resume", None)):
                for stale in _event_files(args.tensorboard):
                    stale.unlink()
            self.views.append(TensorBoardLog(args.tensorboard, records, purge_step=step + 1))

    def read_metrics(self) -> list[dict]:
        path = self.metrics.path
        if path is None or not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    @property
    def records(self) -> int:
        """The lines of metrics.jsonl (what a checkpoint records, ``run_dir.prepare`` cuts back to)."""
        return self.metrics.records

    def write(self, **record) -> None:
        record = self.metrics.write(**record)
        for view in self.views:
            view.write(record)

    def flush(self) -> None:
        for view in self.views:
            view.flush()

    def close(self) -> None:
        for view in self.views:
            view.close()
        self.views = []
