"""The task data and the training tasks live in rooms by idea (tsrnn.data.dyck, tsrnn.data.copy,
tsrnn.data.sine_waves; tsrnn.training.tasks.base, .language, .sequences, .classification); the old
names, tsrnn.synthetic, tsrnn.sine_waves and tsrnn.training.tasks, hand on the same objects."""
import importlib
import inspect

import pytest

from tsrnn.data import copy, dyck, sine_waves
from tsrnn.training import tasks
from tsrnn.training.tasks import base, classification, language, sequences


def _public(module):
    """The names a module defines itself: its classes, functions and constants, not what it imports."""
    return {name for name, value in vars(module).items() if not name.startswith("_") and not inspect.ismodule(value)
            and getattr(value, "__module__", module.__name__) == module.__name__}


@pytest.mark.parametrize("old, new", [("tsrnn.synthetic", dyck), ("tsrnn.synthetic", copy),
                                      ("tsrnn.sine_waves", sine_waves)])
def test_old_module_hands_on_every_public_name(old, new):
    old = importlib.import_module(old)
    names = _public(new)
    assert names
    for name in names:
        assert getattr(old, name) is getattr(new, name), name
    assert set(old.__all__) <= set(dir(old))


def test_tasks_package_exports_every_task():
    for module in (base, language, sequences, classification):
        for name in _public(module):
            assert getattr(tasks, name) is getattr(module, name), name
    assert list(tasks.TASKS) == ["lm", "averaging-lm", "mlp-lm", "dyck", "copy", "freq", "pixels", "imdb"]
    assert all(tasks.TASKS[cls.name] is cls for cls in tasks.TASKS.values())
