"""The modules' earlier import paths, kept working: ``tsrnn.timescales`` is
``tsrnn.memory.timescales``, ``tsrnn.data.vocab`` is ``tsrnn.lab.data.vocab``, and so on.

A finder on ``sys.meta_path`` answers an import of an old name (or of a module under it) by
importing the module's home and registering that same module object under the old name too, so
both names reach one module (one set of globals, one ``isinstance`` class)."""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

HOMES = {
    "tsrnn.cells": "tsrnn.ops.recurrence.cells",
    "tsrnn.packing": "tsrnn.ops.recurrence.packing",
    "tsrnn.scan_layer": "tsrnn.ops.recurrence.export_scan",
    "tsrnn.kernels": "tsrnn.ops",
    "tsrnn.kernels.cells": "tsrnn.ops.recurrence.cells_triton",
    "tsrnn.kernels.per_step": "tsrnn.ops.recurrence.triton_step",
    "tsrnn.kernels.checks": "tsrnn.ops.recurrence.checks",
    "tsrnn.kernels.linear_scan": "tsrnn.ops.linear_scan.triton",
    "tsrnn.extensions": "tsrnn.ops.extensions",
    "tsrnn.verification": "tsrnn.backend.verification",
    "tsrnn.tolerance": "tsrnn.backend.tolerance",
    **{f"tsrnn.{name}": f"tsrnn.memory.{name}" for name in ("timescales", "laplace", "tilt", "averaging", "contexts")},
    **{f"tsrnn.{name}": f"tsrnn.lab.{name}"
       for name in ("training", "models", "analysis", "data", "cli", "cli_checks", "plot", "convert", "selftest")},
}


_LONGEST_FIRST = sorted(HOMES, key=len, reverse=True)  # tsrnn.kernels.cells before tsrnn.kernels


def home(name: str) -> str | None:
    """Where the module once imported as ``name`` lives now (None: it did not move)."""
    for old in _LONGEST_FIRST:
        if name == old or name.startswith(old + "."):
            return HOMES[old] + name[len(old):]
    return None


class _Alias(importlib.abc.Loader):
    """Loads an old name as its home's module object, which keeps its own ``__spec__`` (the import
    system sets the alias's on the object it gets; ``exec_module`` puts the home's back)."""

    def __init__(self, target: str):
        self.target = target
        self.spec = None

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self.spec = module.__spec__
        return module

    def exec_module(self, module):
        module.__spec__ = self.spec

    def get_code(self, name):
        """The home's code: ``python -m`` an old name (runpy) runs the module as its home would."""
        spec = importlib.util.find_spec(self.target)
        return spec.loader.get_code(self.target)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if not name.startswith("tsrnn."):
            return None
        target = home(name)
        if target is None:
            return None
        return importlib.util.spec_from_loader(name, _Alias(target))


if not any(isinstance(f, _Finder) for f in sys.meta_path):
    # first: an old package's alias (tsrnn.kernels is tsrnn.ops) must not let the path finder take
    # tsrnn.kernels.checks for the new package's own checks module
    sys.meta_path.insert(0, _Finder())
