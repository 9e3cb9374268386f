"""The capture-time rules of CUDA graphs, run on CPU tensors: ``tsrnn._validation.capturing_on`` is
the one test of "this work is being captured", so replacing it makes a CPU call take every branch a
captured CUDA call takes. Captured, a call reads no tensor's value on the host (no ``.item()``,
``.tolist()``, ``bool()`` of a tensor, no synchronize), fills no cache with memory that would be the
graph's (the zero vectors, the rounded weights, the effective-bias memo), and reads no cache a
replay would leave stale: the effective bias and the TF32 roundings are recomputed by the graph's
own ops. tests/kernels/recurrence/test_cuda_graphs.py replays real graphs on a GPU.
"""
import pytest
import torch

import tsrnn
from conftest import concatenated
from tsrnn import _validation, precision
from tsrnn.modules import lstm as lstm_module
from tsrnn.ops.recurrence import paths

TIMESCALES = [torch.linspace(1.5, 40.0, 6)]
MAKERS = {"lstm": lambda: tsrnn.LSTM(4, 6, num_layers=2),
          "mts-lstm": lambda: tsrnn.LSTM(4, 6, timescales=TIMESCALES),
          "mts-lstm onednn": lambda: tsrnn.LSTM(4, 6, timescales=TIMESCALES, backend="onednn"),
          "plstm": lambda: tsrnn.PowerLawLSTM(4, 6)}


class HostRead(AssertionError):
    """A tensor's value read on the host while "capturing"."""


@pytest.fixture
def capture(monkeypatch):
    """A switch: while ``capture.on`` is true, every tensor counts as captured and reading a
    value on the host raises ``HostRead``."""

    class Switch:
        on = False

    def forbidden(name, real):
        def read(self, *args, **kwargs):
            if Switch.on:
                raise HostRead(f"{name} of a tensor while capturing")
            return real(self, *args, **kwargs)
        return read

    monkeypatch.setattr(_validation, "capturing_on", lambda t: Switch.on)
    for name in ("item", "tolist", "__bool__", "__int__", "__float__"):
        monkeypatch.setattr(torch.Tensor, name, forbidden(name, getattr(torch.Tensor, name)))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: (_ for _ in ()).throw(HostRead("synchronize")))
    monkeypatch.setattr(precision, "_captured", False)
    return Switch


def step(module, optimizer, x):
    out, state = module(x)
    (out.square().sum() + sum(s.sum() for s in state)).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)
    return out.detach().clone()


@pytest.mark.parametrize("kind", list(MAKERS))
def test_a_captured_step_reads_no_value_and_computes_the_eager_numbers(capture, kind):
    """One eager step, then steps "captured": no host read of a value, and the same numbers as an
    eager twin taking the same steps (the effective bias rebuilt from the biases each time)."""
    torch.manual_seed(0)
    module = MAKERS[kind]()
    twin = MAKERS[kind]()
    twin.load_state_dict(module.state_dict())
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (module, twin)]
    x = torch.randn(5, 3, 4)
    step(module, optimizers[0], x)
    step(twin, optimizers[1], x)
    for _ in range(3):
        capture.on = True
        got = step(module, optimizers[0], x)
        capture.on = False
        torch.testing.assert_close(got, step(twin, optimizers[1], x), rtol=0, atol=0)


def test_value_checks_are_skipped_under_capture(capture):
    """A pLSTM's Δt > 0 and a0 >= 0 checks read values; captured, they are skipped (on CUDA they
    assert on the device outside capture), so the call reads nothing on the host."""
    module, x = tsrnn.PowerLawLSTM(4, 6), torch.randn(5, 3, 4)
    dt, state = torch.rand(5, 3) + 0.5, tuple(torch.zeros(1, 3, 6) for _ in range(3))
    module(x, state, dt=dt)
    capture.on = True
    out, _ = module(x, state, dt=dt)
    capture.on = False
    torch.testing.assert_close(out, module(x, state, dt=dt)[0], rtol=0, atol=0)


def test_the_check_can_fail(capture):
    """The fixture sees a host read."""
    capture.on = True
    with pytest.raises(HostRead):
        bool(torch.ones(1).all())


def test_a_captured_mts_layer_writes_its_bias_into_its_own_tensor_and_keeps_nothing_new(capture):
    """Captured, the effective bias is built by ops (a replay builds it from the biases it then
    holds, so a ``.data`` write that no backward preceded is seen) into the memo's tensor, the one
    the kernel is handed; afterwards every eager call builds it again (replays wrote without Python)."""
    torch.manual_seed(0)
    module, x = tsrnn.LSTM(4, 6, timescales=TIMESCALES, backend="onednn"), torch.randn(5, 3, 4)
    with torch.no_grad():
        module(x)
    memo = module._memo(0, "", x.device)
    kept, zeros = memo["value"], memo["zeros"]
    capture.on = True
    module.bias_ih_l0.data.add_(0.5)  # no new version and no backward: only a captured build sees it
    bias, (_, handed_zeros) = module._biases(0, "")
    capture.on = False
    assert bias.data_ptr() == kept.data_ptr() and handed_zeros is zeros and memo["value"] is kept
    fixed = module.bias_fixed_l0
    want = torch.cat([fixed, (module.bias_ih_l0 + module.bias_hh_l0)[fixed.shape[0]:]])
    assert torch.equal(bias, want)
    module.bias_hh_l0.data.sub_(0.25)  # as a replayed optimizer step writes: seen by the next eager call
    assert torch.equal(module._biases(0, "")[0], module.gate_biases(0))


@pytest.mark.parametrize("flat", [False, True], ids=["separate", "flat"])
def test_a_first_call_under_capture_says_to_run_an_eager_step(capture, monkeypatch, flat):
    """Also for a flat layer, whose memo holds its buffer's slots from the start."""
    if flat:
        monkeypatch.setattr(lstm_module, "_flat_layout", lambda tensors: concatenated)
    module, x = tsrnn.LSTM(4, 6, timescales=TIMESCALES, backend="onednn"), torch.randn(5, 3, 4)
    assert ("slot" in module._memo(0, "", x.device)) == flat
    capture.on = True
    with pytest.raises(RuntimeError, match="run one eager step"):
        module(x)


def test_zero_vectors_are_not_made_under_capture(capture, monkeypatch):
    monkeypatch.setattr(paths, "_ZEROS", {})
    like = torch.randn(7)
    capture.on = True
    with pytest.raises(RuntimeError, match="run one eager step"):
        paths.zeros(like, torch.float32)
    capture.on = False
    made = paths.zeros(like, torch.float32)
    capture.on = True
    assert paths.zeros(like, torch.float32) is made  # made before capture: read, never written


def test_rounded_weights_are_neither_kept_nor_reused_under_capture(capture, monkeypatch):
    monkeypatch.setattr(precision, "_rounded", {})
    w = torch.randn(8, 8)
    eager = precision.rounded_weight(w, "tf32")
    assert precision.rounded_weight(w, "tf32") is eager and len(precision._rounded) == 1
    capture.on = True
    captured = precision.rounded_weight(w, "tf32")
    assert captured is not eager and torch.equal(captured, eager) and len(precision._rounded) == 1
    assert precision._captured, "CUDA weights are no longer kept once a graph captured a rounding"


def test_the_memo_stays_flat_with_a_slot(capture, flat_on_cpu):
    """With a flat buffer (the CPU stand-in of cuDNN's layout), the captured build writes the slot."""
    module, x = tsrnn.LSTM(4, 6, timescales=TIMESCALES, backend="onednn"), torch.randn(5, 3, 4)
    module(x)
    slot = module._memo(0, "", x.device)["slot"]
    capture.on = True
    bias, (_, zeros) = module._biases(0, "")
    assert bias.data_ptr() == slot.data_ptr() and paths.one_buffer(module.weight_ih_l0, module.weight_hh_l0, bias, zeros)
