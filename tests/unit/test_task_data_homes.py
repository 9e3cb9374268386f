"""Each module has one name, its home (ARCHITECTURE.md): the task data and the training tasks live in
rooms by idea (tsrnn.lab.data.dyck, .copy, .sine_waves; tsrnn.lab.training.tasks.base, .language,
.sequences, .classification), and the modules' earlier names, kept by an import hook before 0.1.0,
are gone: importing one fails."""
import importlib
import inspect

import pytest

from tsrnn.lab.training import tasks
from tsrnn.lab.training.tasks import base, classification, language, sequences

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


def test_tasks_package_exports_every_task():
    for module in (base, language, sequences, classification):
        for name in _public(module):
            assert getattr(tasks, name) is getattr(module, name), name
    assert list(tasks.TASKS) == ["lm", "averaging-lm", "mlp-lm", "dyck", "copy", "freq", "pixels", "imdb"]
    assert all(tasks.TASKS[cls.name] is cls for cls in tasks.TASKS.values())
