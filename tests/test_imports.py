"""``import tsrnn`` loads the kernels only: the data, models, training, plotting and synthetic-task
modules (and matplotlib, tqdm, scipy) load on first use, through the package's ``__getattr__``."""
import json
import subprocess
import sys

LAZY_SUBMODULES = ["tsrnn.data", "tsrnn.models", "tsrnn.training", "tsrnn.plot", "tsrnn.synthetic"]
HEAVY = ["matplotlib", "tqdm", "scipy"]

# Fresh interpreter: torch first, to tell what torch itself loads (torch.hub imports tqdm when it
# is installed) from what tsrnn adds; then tsrnn, then one lazy name.
SCRIPT = """
import json, sys
import torch
by_torch = sorted(m for m in sys.modules)
import tsrnn
after_import = sorted(sys.modules)
tilt_before = "tsrnn.tilt" in sys.modules
TILT = tsrnn.TILT
print(json.dumps({"by_torch": by_torch, "after_import": after_import, "tilt_before": tilt_before,
                  "tilt_after": "tsrnn.tilt" in sys.modules, "tilt_module": TILT.__module__}))
"""


def _run(script):
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_tsrnn_loads_the_kernels_only():
    r = _run(SCRIPT)
    loaded = set(r["after_import"])
    by_torch = set(r["by_torch"])
    for name in ["tsrnn.backend", "tsrnn.cells", "tsrnn.functional", "tsrnn.ops", "tsrnn.reference",
                 "tsrnn.timescales", "tsrnn.modules"]:
        assert name in loaded, name
    for name in LAZY_SUBMODULES:
        assert name not in loaded, f"import tsrnn loaded {name}"
    for name in HEAVY:
        if name in by_torch:  # loaded by torch itself, not tsrnn's doing
            continue
        assert name not in loaded, f"import tsrnn loaded {name}"
    assert "matplotlib" not in loaded and "scipy" not in loaded
    assert not r["tilt_before"]
    assert r["tilt_after"], "tsrnn.TILT did not load tsrnn.tilt"
    assert r["tilt_module"] == "tsrnn.tilt"


def test_lazy_names_resolve():
    import tsrnn
    from tsrnn import TILT, BufferContext, TILTBufferContext, TILTContext, averaging_context
    from tsrnn.averaging import averaging_context as averaging_context_
    from tsrnn.contexts import BufferContext as BufferContext_
    from tsrnn.tilt import TILT as TILT_

    assert TILT is TILT_ is tsrnn.TILT
    assert averaging_context is averaging_context_ is tsrnn.averaging_context
    assert BufferContext is BufferContext_
    assert TILTContext.__module__ == TILTBufferContext.__module__ == "tsrnn.contexts"
    for name in ["data", "models", "training", "synthetic", "plot", "convert", "contexts", "averaging",
                 "tilt", "laplace", "selftest", "cli"]:
        assert getattr(tsrnn, name).__name__ == f"tsrnn.{name}"
    assert tsrnn.synthetic.DYCK_PAD == 4
    listed = dir(tsrnn)
    for name in tsrnn.__all__ + ["TILT", "data", "models", "training", "synthetic", "LSTM", "backend"]:
        assert name in listed, name
    try:
        tsrnn.no_such_name
    except AttributeError:
        pass
    else:
        raise AssertionError("tsrnn.no_such_name did not raise AttributeError")
