"""``import tsrnn`` loads the engine only: the lab (data, models, training, plotting) and the memory
science beyond the timescales (and matplotlib, tqdm, scipy) load on first use, through the
package's ``__getattr__`` (PEP 562) or an import of their homes. The earlier module names are gone
(tests/unit/test_task_data_homes.py); of them only ``timescales`` stays, as an attribute."""
import importlib
import json
import subprocess
import sys

import pytest

LAZY_SUBMODULES = ["tsrnn.lab", "tsrnn.lab.data", "tsrnn.lab.models", "tsrnn.lab.training", "tsrnn.lab.plot",
                   "tsrnn.memory.tilt", "tsrnn.memory.contexts"]
HEAVY = ["matplotlib", "tqdm", "scipy"]

# Fresh interpreter: torch first, to tell what torch itself loads (torch.hub imports tqdm when it
# is installed) from what tsrnn adds; then tsrnn, then one lazy name.
SCRIPT = """
import json, sys
import torch
by_torch = sorted(m for m in sys.modules)
import tsrnn
after_import = sorted(sys.modules)
tilt_before = "tsrnn.memory.tilt" in sys.modules
TILT = tsrnn.TILT
print(json.dumps({"by_torch": by_torch, "after_import": after_import, "tilt_before": tilt_before,
                  "tilt_after": "tsrnn.memory.tilt" in sys.modules, "tilt_module": TILT.__module__}))
"""


def _run(script):
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_tsrnn_loads_the_kernels_only():
    r = _run(SCRIPT)
    loaded = set(r["after_import"])
    by_torch = set(r["by_torch"])
    for name in ["tsrnn.backend", "tsrnn.ops.recurrence.cells", "tsrnn.functional", "tsrnn.ops", "tsrnn.reference",
                 "tsrnn.memory.timescales", "tsrnn.modules"]:
        assert name in loaded, name
    for name in LAZY_SUBMODULES:
        assert name not in loaded, f"import tsrnn loaded {name}"
    for name in HEAVY:
        if name in by_torch:  # loaded by torch itself, not tsrnn's doing
            continue
        assert name not in loaded, f"import tsrnn loaded {name}"
    assert "matplotlib" not in loaded and "scipy" not in loaded
    assert not r["tilt_before"]
    assert r["tilt_after"], "tsrnn.TILT did not load tsrnn.memory.tilt"
    assert r["tilt_module"] == "tsrnn.memory.tilt"


def test_lazy_names_resolve():
    import tsrnn
    from tsrnn import TILT, BufferContext, TILTBufferContext, TILTContext, averaging_context
    from tsrnn.memory.averaging import averaging_context as averaging_context_
    from tsrnn.memory.contexts import BufferContext as BufferContext_
    from tsrnn.memory.tilt import TILT as TILT_

    assert TILT is TILT_ is tsrnn.TILT
    assert averaging_context is averaging_context_ is tsrnn.averaging_context
    assert BufferContext is BufferContext_
    assert TILTContext.__module__ == TILTBufferContext.__module__ == "tsrnn.memory.contexts"
    listed = dir(tsrnn)
    for name in tsrnn.__all__ + ["TILT", "LSTM", "backend", "memory", "lab", "timescales"]:
        assert name in listed, name
    for name in ["no_such_name", "data", "models", "training", "plot", "cells", "contexts", "tilt", "laplace"]:
        with pytest.raises(AttributeError):   # the earlier module names are no attributes either
            getattr(tsrnn, name)
        assert name not in listed, name


def test_the_short_names_are_their_homes():
    """``memory``, ``lab`` and ``timescales`` (the module tsrnn.memory.timescales) are attributes; an
    import statement takes the home: there is no module tsrnn.<short name> but the two packages."""
    import tsrnn
    import tsrnn.lab
    import tsrnn.memory
    import tsrnn.memory.timescales

    assert getattr(tsrnn, "timescales") is tsrnn.memory.timescales
    assert tsrnn.memory.__name__ == "tsrnn.memory" and tsrnn.lab.__name__ == "tsrnn.lab"
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("tsrnn." + "timescales")
    from tsrnn import lab, memory, timescales

    assert (lab, memory, timescales) == (tsrnn.lab, tsrnn.memory, tsrnn.memory.timescales)


def test_the_short_timescales_loads_nothing_new():
    r = _run("import json, sys, tsrnn\nbefore = set(sys.modules)\ntimescales = getattr(tsrnn, 'timescales')\n"
             "print(json.dumps({'new': sorted(set(sys.modules) - before), 'name': timescales.__name__}))")
    assert r == {"new": [], "name": "tsrnn.memory.timescales"}
