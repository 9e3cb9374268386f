"""What the torch-LSTM paths (onednn, cudnn) hand torch's LSTM kernel: a module's own tensors,
built once per parameter state. A plain layer passes its Parameters W_ih, W_hh, b_ih, b_hh as
torch.nn.LSTM does; an MTS layer its weights, its effective bias (kept per state of b_ih, b_hh and
the fixed biases) and a zero vector. On CUDA ``flatten_parameters`` lays a layer's four out in one
buffer in cuDNN's layout (tests/kernels/recurrence/test_cudnn_tf32.py runs cuDNN on it); here the
layout is a plain concatenation (``concatenated``), so the same module code (the Parameters turned
into views, the effective bias written into its slot once per state, the re-flattening after a
move) runs on the CPU, with oneDNN reading the buffer.
"""
import pytest
import torch

import tsrnn
from tsrnn.modules import lstm as lstm_module

TIMESCALES = [torch.linspace(1.5, 40.0, 6)]


def concatenated(tensors, input_size, hidden_size):
    """The CPU stand-in for cuDNN's layout: the tensors one after the other in one new buffer."""
    flat = torch.cat([t.reshape(-1) for t in tensors])
    offset = 0
    for t in tensors:
        t.set_(flat.untyped_storage(), offset, t.shape)
        offset += t.numel()


@pytest.fixture
def flat_on_cpu(monkeypatch):
    monkeypatch.setattr(lstm_module, "_flat_layout", lambda tensors: concatenated)


class Spy:
    """Records the weight lists torch's LSTM kernel receives."""

    def __init__(self, monkeypatch):
        self.calls = []
        real = torch._VF.lstm

        def lstm(*args):
            packed = isinstance(args[3], (list, tuple))  # (data, batch_sizes, hx, params, ...)
            self.calls.append(list(args[3] if packed else args[2]))
            return real(*args)

        monkeypatch.setattr(torch._VF, "lstm", lstm)


def make(timescales=None, seed=0, backend="onednn"):
    torch.manual_seed(seed)
    return tsrnn.LSTM(4, 6, backend=backend, timescales=timescales)


def test_a_plain_layer_hands_its_own_parameters(monkeypatch):
    module, spy = make(), Spy(monkeypatch)
    module(torch.randn(3, 2, 4))
    assert len(spy.calls) == 1
    want = [module.weight_ih_l0, module.weight_hh_l0, module.bias_ih_l0, module.bias_hh_l0]
    assert all(got is w for got, w in zip(spy.calls[0], want))


def test_a_plain_layer_on_onednn_is_torch_nn_lstm_bit_for_bit():
    module = make()
    torch_lstm = torch.nn.LSTM(4, 6)
    torch_lstm.load_state_dict(module.state_dict())
    x = torch.randn(7, 3, 4)
    out, (h, c) = module(x)
    want, (h_want, c_want) = torch_lstm(x)
    assert torch.equal(out, want) and torch.equal(h, h_want) and torch.equal(c, c_want)
    out.square().sum().backward()
    want.square().sum().backward()
    for (name, p), q in zip(module.named_parameters(), torch_lstm.parameters()):
        assert torch.equal(p.grad, q.grad), name


def test_an_mts_layer_builds_its_effective_bias_once_per_state(monkeypatch):
    module, spy = make(TIMESCALES), Spy(monkeypatch)
    x = torch.randn(3, 2, 4)
    module(x)
    module(x)
    first, second = spy.calls
    assert first[0] is module.weight_ih_l0 and first[1] is module.weight_hh_l0
    assert first[2].data_ptr() == second[2].data_ptr() and first[3].data_ptr() == second[3].data_ptr()
    assert torch.equal(first[2], module.gate_biases(0)) and not first[3].any()
    optimizer = torch.optim.SGD(module.parameters(), lr=0.5)
    module(x)[0].sum().backward()
    optimizer.step()
    module(x)
    assert torch.equal(spy.calls[-1][2], module.gate_biases(0))
    assert not torch.equal(spy.calls[-1][2], first[2]), "the step moved the learned rows"


@pytest.mark.parametrize("timescales", [None, TIMESCALES], ids=["plain", "mts"])
def test_a_training_loop_through_data_is_seen(timescales):
    """The ``p.data.add_(-lr, p.grad)`` loop of older examples: the write after each backward reaches
    the next forward (a memo keyed on versions alone would keep the old bias)."""
    module = make(timescales)
    x = torch.randn(5, 2, 4)
    for _ in range(2):
        module.zero_grad()
        module(x)[0].square().sum().backward()
        for p in module.parameters():
            p.data.add_(p.grad, alpha=-0.3)
    fresh = make(timescales, seed=1)
    fresh.load_state_dict(module.state_dict())
    assert torch.equal(module(x)[0], fresh(x)[0])


@pytest.mark.parametrize("timescales", [None, TIMESCALES], ids=["plain", "mts"])
@pytest.mark.parametrize("backend", ["onednn", "cpu"])
def test_inference_mode_first_then_training(timescales, backend):
    """A first call under torch.inference_mode builds the zero vector and the effective bias: as
    normal tensors, which a later call with autograd can save."""
    module = make(timescales, backend=backend)
    x = torch.randn(5, 2, 4)
    with torch.inference_mode():
        expected = module(x)[0]
    out = module(x)[0]
    out.square().sum().backward()
    assert torch.equal(out, expected) and module.weight_hh_l0.grad is not None
    memo = module.__dict__.get("_bias_memo", {}).get(0, {})
    assert "value" not in memo or not memo["value"].requires_grad, "the memo records no graph"


@pytest.mark.parametrize("timescales", [None, TIMESCALES], ids=["plain", "mts"])
def test_flattening_makes_one_buffer_and_changes_no_value(flat_on_cpu, timescales):
    torch.manual_seed(0)
    plain_state = make(timescales).state_dict()
    module = make(timescales)  # flattened at construction (the patched layout)
    storages = {p.untyped_storage().data_ptr() for n, p in module.named_parameters() if n.startswith("weight")}
    if timescales is None:
        storages |= {module.bias_ih_l0.untyped_storage().data_ptr(), module.bias_hh_l0.untyped_storage().data_ptr()}
    assert len(storages) == 1 and module.weight_ih_l0.storage_offset() == 0
    assert all(torch.equal(v, plain_state[k]) for k, v in module.state_dict().items())
    before = module.weight_ih_l0.untyped_storage().data_ptr()
    module.flatten_parameters()
    assert module.weight_ih_l0.untyped_storage().data_ptr() == before, "a flat layer is left as it is"


def test_the_effective_bias_slot_is_reused_and_rewritten_after_a_step(flat_on_cpu, monkeypatch):
    module = make(TIMESCALES)
    with monkeypatch.context() as m:
        m.setattr(lstm_module, "_flat_layout", lambda tensors: None)
        unflat = make(TIMESCALES)
    slot = module.__dict__["_bias_memo"][0]["slot"]
    assert slot.untyped_storage().data_ptr() == module.weight_ih_l0.untyped_storage().data_ptr()
    spy = Spy(monkeypatch)
    x = torch.randn(6, 3, 4)
    out = module(x)[0]
    version = slot._version
    assert torch.equal(module(x)[0], out) and slot._version == version, "a warm call writes nothing"
    assert spy.calls[0][2].data_ptr() == slot.data_ptr()
    assert spy.calls[0][3].untyped_storage().data_ptr() == slot.untyped_storage().data_ptr()
    assert torch.equal(out, unflat(x)[0])
    optimizers = [torch.optim.Adam(m.parameters(), lr=0.05) for m in (module, unflat)]
    for m, opt in zip((module, unflat), optimizers):
        m(x)[0].square().sum().backward()
        opt.step()
    out = module(x)[0]
    assert slot._version > version and torch.equal(slot, module.gate_biases(0))
    assert torch.equal(out, unflat(x)[0])
    for (name, p), q in zip(module.named_parameters(), unflat.parameters()):
        assert torch.equal(p, q), name


def test_a_cast_flattens_again(flat_on_cpu):
    module = make(TIMESCALES).double()
    x = torch.randn(4, 2, 4, dtype=torch.float64)
    slot = module.__dict__["_bias_memo"][0]["slot"]
    assert slot.dtype == torch.float64
    assert slot.untyped_storage().data_ptr() == module.weight_hh_l0.untyped_storage().data_ptr()
    out = module(x)[0]
    reference = make(TIMESCALES, backend="reference").double()
    torch.testing.assert_close(out, reference(x)[0])


def test_a_copy_is_flat_and_computes_the_same(flat_on_cpu):
    import copy

    module = make(TIMESCALES)
    x = torch.randn(4, 2, 4)
    out = module(x)[0]
    twin = copy.deepcopy(module)
    assert twin.weight_ih_l0.untyped_storage().data_ptr() != module.weight_ih_l0.untyped_storage().data_ptr()
    slot = twin.__dict__["_bias_memo"][0]["slot"]
    assert slot.untyped_storage().data_ptr() == twin.weight_hh_l0.untyped_storage().data_ptr()
    assert torch.equal(twin(x)[0], out)


@pytest.mark.parametrize("timescales", [None, TIMESCALES], ids=["plain", "mts"])
def test_a_bias_written_in_place_after_it_was_handed_out_is_taken_as_written(timescales):
    """``gate_biases`` hands out the layer's bias (an MTS layer's: a view of its memo, which torch
    lets one write into only detached): a write into it reaches a functional call that takes it,
    and an MTS layer builds its effective bias again."""
    module = make(timescales)
    x, h0, c0 = torch.randn(5, 2, 4), torch.zeros(2, 6), torch.zeros(2, 6)
    module(x)
    bias = module.gate_biases(0) if timescales is None else module.gate_biases(0).detach()
    with torch.no_grad():
        bias.add_(0.5)
    weights = (module.weight_ih_l0.detach(), module.weight_hh_l0.detach())
    got = tsrnn.functional.lstm(x, h0, c0, *weights, bias, backend="onednn")[0]
    want = tsrnn.functional.lstm(x, h0, c0, *weights, bias.clone(), backend="reference")[0]
    torch.testing.assert_close(got, want)
    fresh = make(timescales)
    assert torch.equal(module(x)[0], fresh(x)[0]), "the module's own bias is unchanged"
