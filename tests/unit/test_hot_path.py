"""A warm forward crosses few tsrnn frames and makes few Python calls (ARCHITECTURE.md, "the call
path"): the module's forward asks ``tsrnn.backend.routing.route`` for the remembered path record
and runs the runner the record holds, which calls the operator.

Counted as a profiler sees them (``sys.setprofile``): every call event whose code lives in tsrnn's
files, comprehensions and generator resumptions included; frames: the most tsrnn frames on the
stack at once: the module's forward (and the pLSTM's, which names its inputs), the path's runner, ``tsrnn.ops.library.call`` and, where
a gradient will flow, its autograd Function's forward and the op's setup (tsrnn's frames where
torch.library's own Python wrapper would add more of torch's). The calls include small helpers
that spare slower Python of torch's (``StackedRNN._member`` for nn.Module's ``__getattr__``, the
runners' ``_as`` for a ``Tensor.to`` that changes nothing): 41 (LSTM) and 47 (pLSTM) a warm
forward where the issue that set the bound counted 109 and 159."""
import os
import sys

import pytest
import torch

import tsrnn
from conftest import needs_native

ROOT = os.path.dirname(tsrnn.__file__) + os.sep
MAX_FRAMES, MAX_CALLS = 6, 48


def profile(module, x):
    """(deepest tsrnn nesting, tsrnn calls, {function: calls}) of one forward of ``module``."""
    deepest, calls = 0, {}

    def hook(frame, event, arg):
        nonlocal deepest
        if event != "call" or not frame.f_code.co_filename.startswith(ROOT):
            return
        name = f"{frame.f_code.co_filename[len(ROOT):]}:{frame.f_code.co_name}"
        calls[name] = calls.get(name, 0) + 1
        depth, f = 0, frame
        while f is not None:
            depth += f.f_code.co_filename.startswith(ROOT)
            f = f.f_back
        deepest = max(deepest, depth)

    sys.setprofile(hook)
    try:
        module(x)
    finally:
        sys.setprofile(None)
    return deepest, sum(calls.values()), calls


@pytest.mark.parametrize("backend", ["auto", pytest.param("cpu", marks=needs_native), "onednn"])
@pytest.mark.parametrize("make", [tsrnn.LSTM, tsrnn.PowerLawLSTM], ids=["LSTM", "PowerLawLSTM"])
def test_a_warm_forward_is_short(make, backend):
    if make is tsrnn.PowerLawLSTM and backend == "onednn":
        pytest.skip("oneDNN runs the LSTM cell only")
    torch.manual_seed(0)
    module, x = make(16, 32, backend=backend), torch.randn(5, 3, 16)
    module(x)
    module(x)  # warm: the path is chosen, verified and timed once per call key
    frames, count, calls = profile(module, x)
    detail = ", ".join(f"{name} {n}" for name, n in sorted(calls.items(), key=lambda kv: -kv[1]))
    assert frames <= MAX_FRAMES, f"{frames} tsrnn frames deep: {detail}"
    assert count <= MAX_CALLS, f"{count} tsrnn calls: {detail}"


def test_the_count_sees_a_longer_path():
    """The measure can fail: the reference path's step loop makes calls per step."""
    module, x = tsrnn.PowerLawLSTM(16, 32, backend="reference"), torch.randn(5, 3, 16)
    module(x)
    frames, count, _ = profile(module, x)
    assert count > MAX_CALLS


def test_a_warm_call_reads_no_environment(monkeypatch):
    """A warm call takes the remembered path: a TSRNN_BACKEND set afterwards reaches only keys not
    seen yet, or every key after ``tsrnn.backend.forget()``."""
    module, x = tsrnn.LSTM(3, 4), torch.randn(5, 2, 3)
    module(x)
    monkeypatch.setenv("TSRNN_BACKEND", "not a backend")
    module(x)  # remembered: the variable is not read
    tsrnn.backend.forget()
    with pytest.raises(ValueError, match="TSRNN_BACKEND"):
        module(x)


def test_an_mts_layer_builds_its_bias_once_per_parameter_version():
    """The effective bias of a multi-timescale layer is built on the first call and after each
    change of its biases (an optimizer step here), not on every call, and in the same memory; its
    fixed rows get no gradient; a backward marks it for a rebuild (a ``.data`` write may follow)."""
    torch.manual_seed(0)
    module, x = tsrnn.LSTM(3, 4, timescales=[torch.linspace(1, 10, 4)]), torch.randn(5, 2, 3)
    n = 2 * module.hidden_size  # the fixed i and f rows

    def plain():
        return torch.cat([module.bias_fixed_l0, (module.bias_ih_l0 + module.bias_hh_l0)[n:]])

    def forwards():
        """The effective bias a forward adds, and its version."""
        bias, (same, zeros) = module._biases(0, "")
        assert same is bias
        assert not zeros.any()
        return bias, bias._version

    (first, version) = forwards()
    second, again = forwards()
    assert second.data_ptr() == first.data_ptr() and again == version  # built by the first call only
    assert torch.equal(first, plain())
    kept = first.detach().clone()
    optimizer = torch.optim.SGD(module.parameters(), lr=0.5)
    module(x)[0].sum().backward()
    assert torch.count_nonzero(module.bias_ih_l0.grad[:n]) == 0 and torch.count_nonzero(module.bias_ih_l0.grad[n:]) > 0
    assert torch.equal(module.bias_ih_l0.grad, module.bias_hh_l0.grad)
    optimizer.step()
    after, moved = forwards()
    assert after.data_ptr() == first.data_ptr() and moved > version and torch.equal(after, plain())
    assert not torch.equal(after[n:], kept[n:]) and torch.equal(after[:n], kept[:n])
    with torch.no_grad():
        module.bias_hh_l0.add_(1.0)  # in place, as optimizers and load_state_dict write: a new version
    assert torch.equal(forwards()[0], plain())
    module(x)[0].sum().backward()
    module.bias_ih_l0.data.add_(1.0)  # no new version: seen because a backward came before it
    rebuilt, unchanged = forwards()
    assert torch.equal(rebuilt, plain()) and unchanged == forwards()[1]
