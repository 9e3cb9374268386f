"""The task data and the training tasks live in rooms by idea (tsrnn.lab.data.dyck, .copy,
.sine_waves; tsrnn.lab.training.tasks.base, .language, .sequences, .classification); every
module's earlier import path (tsrnn._moved) reaches the same module object."""
import importlib
import inspect

import pytest

from tsrnn import _moved
from tsrnn.lab.data import sine_waves
from tsrnn.lab.training import tasks
from tsrnn.lab.training.tasks import base, classification, language, sequences


def _public(module):
    """The names a module defines itself: its classes, functions and constants, not what it imports."""
    return {name for name, value in vars(module).items() if not name.startswith("_") and not inspect.ismodule(value)
            and getattr(value, "__module__", module.__name__) == module.__name__}


@pytest.mark.parametrize("old", sorted(_moved.HOMES))
def test_an_earlier_import_path_reaches_the_same_module(old):
    new = _moved.HOMES[old]
    assert importlib.import_module(old) is importlib.import_module(new)


def test_a_module_under_an_earlier_path_is_the_same_module():
    from tsrnn.data.sine_waves import sine_waves as old_function
    import tsrnn.training.tasks.base as old_base

    assert old_function is sine_waves.sine_waves and old_base is base
    assert importlib.import_module("tsrnn.kernels.per_step").__name__ == "tsrnn.ops.recurrence.triton_step"


def test_the_removed_shims_are_gone():
    for name in ("tsrnn.synthetic", "tsrnn.sine_waves", "tsrnn.kernels.persistent", "tsrnn.kernels.capacity"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(name)


def test_tasks_package_exports_every_task():
    for module in (base, language, sequences, classification):
        for name in _public(module):
            assert getattr(tasks, name) is getattr(module, name), name
    assert list(tasks.TASKS) == ["lm", "averaging-lm", "mlp-lm", "dyck", "copy", "freq", "pixels", "imdb"]
    assert all(tasks.TASKS[cls.name] is cls for cls in tasks.TASKS.values())
