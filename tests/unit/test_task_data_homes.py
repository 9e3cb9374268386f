"""Each module has one name, its home (ARCHITECTURE.md): the task data and the training tasks live in
rooms by idea (tsrnn.lab.data.dyck, .copy, .sine_waves; tsrnn.lab.training.tasks.base, .language,
.sequences, .classification), and the modules' earlier names, kept by an import hook before 0.1.0,
are gone: importing one fails, and no tracked file but CHANGELOG.md names one."""
import importlib
import inspect
import re
import subprocess
from pathlib import Path

import pytest

from tsrnn.lab.training import tasks
from tsrnn.lab.training.tasks import base, classification, language, sequences

ROOT = Path(__file__).resolve().parents[2]

# Each earlier name under tsrnn -> its home under tsrnn (written without the "tsrnn." prefix, so that
# this file does not name the earlier modules itself).
HOMES = {
    "cells": "ops.recurrence.cells",
    "packing": "ops.recurrence.packing",
    "scan_layer": "ops.recurrence.export_scan",
    "kernels": "ops",
    "kernels.cells": "ops.recurrence.cells_triton",
    "kernels.per_step": "ops.recurrence.triton_step",
    "kernels.checks": "ops.recurrence.checks",
    "kernels.linear_scan": "ops.linear_scan.triton",
    "extensions": "ops.extensions",
    "verification": "backend.verification",
    "tolerance": "backend.tolerance",
    **{name: f"memory.{name}" for name in ("timescales", "laplace", "tilt", "averaging", "contexts")},
    **{name: f"lab.{name}" for name in ("training", "models", "analysis", "data", "cli", "cli_checks", "plot",
                                        "convert", "selftest")},
}
# Names removed before those (shims of an earlier layout).
REMOVED = ("synthetic", "sine_waves", "kernels.persistent", "kernels.capacity")
# Any of them (or a module under one) as a dotted path from tsrnn (its dot escaped too, as in a
# regular expression) or a file path under tsrnn/.
OLD_NAME = re.compile(r"\btsrnn(?:[./]|\\\.)(?:%s)\b" % "|".join(
    sorted({name.split(".")[0] for name in (*HOMES, *REMOVED)}, key=len, reverse=True)))
SCANNED = ("py", "md", "txt", "toml", "cfg", "in", "h", "cpp", "cu", "yml", "yaml", "sh")


def _public(module):
    """The names a module defines itself: its classes, functions and constants, not what it imports."""
    return {name for name, value in vars(module).items() if not name.startswith("_") and not inspect.ismodule(value)
            and getattr(value, "__module__", module.__name__) == module.__name__}


@pytest.mark.parametrize("old", sorted(HOMES) + ["data.vocab", "training.tasks.base", *REMOVED])
def test_an_earlier_name_is_not_importable(old):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"tsrnn.{old}")


@pytest.mark.parametrize("old", sorted(HOMES))
def test_every_home_imports(old):
    assert importlib.import_module(f"tsrnn.{HOMES[old]}").__name__ == f"tsrnn.{HOMES[old]}"


def old_names(text):
    """The earlier module names a text holds (dotted or as a path), in order."""
    return [match.group(0) for match in OLD_NAME.finditer(text)]


def test_the_scan_finds_an_earlier_name():
    data, cells = "tsrnn.%s" % "data", "tsrnn/%s" % "cells"   # not spelt out: the scan reads this file too
    assert old_names(f"from tsrnn.lab.data import vocab\nimport {data}.vocab  # planted\nsee {cells}.py\n") == [data, cells]
    assert old_names("tsrnn.lab.data, tsrnn.memory.timescales, tsrnn.ops.recurrence.cells, tsrnn.TILTContext, "
                     "tsrnn.load, torch.ops.tsrnn.cpu_gemm, tsrnn/lab/data/, tsrnn.datasets") == []


def test_no_tracked_file_names_an_earlier_module():
    """Every tracked source and text file (code, docs, build files) but CHANGELOG.md, which records the
    move, names each module by its home."""
    if not (ROOT / ".git").exists():
        pytest.skip("needs the source checkout")
    listed = subprocess.run(["git", "ls-files", *(f"*.{ext}" for ext in SCANNED)], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.split()
    assert "tsrnn/__init__.py" in listed
    found = {}
    for name in listed:
        if name == "CHANGELOG.md" or not (ROOT / name).is_file():
            continue
        for number, line in enumerate((ROOT / name).read_text(encoding="utf-8").splitlines(), 1):
            if old_names(line):
                found[f"{name}:{number}"] = line.strip()
    assert not found, "earlier module names (their homes: HOMES here):\n" + "\n".join(
        f"{where}: {line}" for where, line in found.items())


def test_tasks_package_exports_every_task():
    for module in (base, language, sequences, classification):
        for name in _public(module):
            assert getattr(tasks, name) is getattr(module, name), name
    assert list(tasks.TASKS) == ["lm", "averaging-lm", "mlp-lm", "dyck", "copy", "freq", "pixels", "imdb"]
    assert all(tasks.TASKS[cls.name] is cls for cls in tasks.TASKS.values())
