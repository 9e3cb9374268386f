"""What the torch-LSTM paths (onednn, cudnn) hand torch's LSTM kernel: a module's own tensors,
built once per parameter state. A plain layer passes its Parameters W_ih, W_hh, b_ih, b_hh as
torch.nn.LSTM does; an MTS layer its weights, its effective bias (kept per state of b_ih, b_hh and
the fixed biases) and a zero vector. On CUDA ``flatten_parameters`` lays a layer's four out in one
buffer in cuDNN's layout (tests/kernels/recurrence/test_cudnn_tf32.py runs cuDNN on it); here the
layout is a plain concatenation (``concatenated``), so the same module code (the Parameters turned
into views, the effective bias written into its slot once per state, the re-flattening after a
move) runs on the CPU, with oneDNN reading the buffer. Every effective bias is checked against
[fixed; (b_ih + b_hh)[n:]] computed here, never against the module's own memo.
"""
import copy
import io

import pytest
import torch

import tsrnn
from tsrnn.modules import lstm as lstm_module

TIMESCALES = [torch.linspace(1.5, 40.0, 6)]


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


def effective_bias(module, layer=0):
    """[fixed; (b_ih + b_hh)[n:]] from the module's tensors, computed here."""
    b_ih, b_hh = getattr(module, f"bias_ih_l{layer}"), getattr(module, f"bias_hh_l{layer}")
    fixed = getattr(module, f"bias_fixed_l{layer}")
    return torch.cat([fixed, (b_ih + b_hh)[fixed.shape[0]:]]).detach()


def by_hand(module, params, x):
    """The first layer's output with the biases in ``params``, computed by the functional reference
    loop from an effective bias formed here (no module memo involved)."""
    fixed = module.bias_fixed_l0 if 0 in module.timescale_layers else None
    bias = params["bias_ih_l0"] + params["bias_hh_l0"]
    if fixed is not None:
        bias = torch.cat([fixed, bias[fixed.shape[0]:]])
    zeros = torch.zeros(x.shape[1], module.hidden_size)
    weights = (module.weight_ih_l0.detach(), module.weight_hh_l0.detach())
    return tsrnn.functional.lstm(x, zeros, zeros, *weights, bias.detach(), backend="reference")[0]


def memo(module, layer=0):
    return module._memo(layer, "", module.weight_ih_l0.device)


def same_function(module, timescales, x):
    """Whether ``module`` computes on x what a fresh module loaded with its state dict computes."""
    fresh = make(timescales, seed=1)
    fresh.load_state_dict(module.state_dict())
    with torch.no_grad():
        return torch.equal(module(x)[0], fresh(x)[0])


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
    assert torch.equal(first[2], effective_bias(module)) and not first[3].any()
    before = first[2].detach().clone()
    optimizer = torch.optim.SGD(module.parameters(), lr=0.5)
    module(x)[0].sum().backward()
    optimizer.step()
    module(x)
    assert torch.equal(spy.calls[-1][2], effective_bias(module))
    assert not torch.equal(spy.calls[-1][2], before), "the step moved the learned rows"
    assert spy.calls[-1][2].data_ptr() == first[2].data_ptr(), "rebuilt in place: no new tensor"


@pytest.mark.parametrize("timescales", [None, TIMESCALES], ids=["plain", "mts"])
def test_a_training_loop_through_data_is_seen_at_every_step(timescales):
    """The ``p.data.add_(-lr, p.grad)`` loop of older examples (zero_grad first, as PyTorch's word
    language model example): each forward sees the previous step's write, which torch counts as
    no new version."""
    module = make(timescales)
    x = torch.randn(5, 2, 4)
    for _ in range(3):
        module.zero_grad()
        assert same_function(module, timescales, x)
        module(x)[0].square().sum().backward()
        for p in module.parameters():
            p.data.add_(p.grad, alpha=-0.3)
    assert same_function(module, timescales, x)


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
    kept = memo(module).get("value")
    assert kept is None or (not kept.requires_grad and not kept.is_inference()), "the memo records no graph"


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


def test_flatten_parameters_where_nothing_is_flattened_keeps_the_effective_bias():
    """On the CPU (and wherever torch would not flatten) it is a no-op: code that calls it before
    every forward does not rebuild the effective bias."""
    module = make(TIMESCALES)
    x = torch.randn(3, 2, 4)
    module(x)
    kept = memo(module)["value"]
    module.flatten_parameters()
    module(x)
    assert memo(module)["value"] is kept


def test_tied_parameters_are_not_flattened(flat_on_cpu):
    torch.manual_seed(0)
    module = tsrnn.LSTM(6, 6, num_layers=2, backend="onednn")
    module.weight_hh_l1 = module.weight_hh_l0
    module.flatten_parameters()
    assert module.weight_hh_l1 is module.weight_hh_l0
    assert module.weight_hh_l0.untyped_storage().data_ptr() != module.weight_ih_l1.untyped_storage().data_ptr()


def test_the_effective_bias_slot_is_reused_and_rewritten_after_a_step(flat_on_cpu, monkeypatch):
    module = make(TIMESCALES)
    with monkeypatch.context() as m:
        m.setattr(lstm_module, "_flat_layout", lambda tensors: None)
        unflat = make(TIMESCALES)
    slot = memo(module)["slot"]
    assert slot.untyped_storage().data_ptr() == module.weight_ih_l0.untyped_storage().data_ptr()
    spy = Spy(monkeypatch)
    x = torch.randn(6, 3, 4)
    out = module(x)[0]
    version = slot._version
    assert torch.equal(module(x)[0], out) and slot._version == version, "a warm call writes nothing"
    assert spy.calls[0][2].data_ptr() == slot.data_ptr() and torch.equal(slot, effective_bias(module))
    assert spy.calls[0][3].untyped_storage().data_ptr() == slot.untyped_storage().data_ptr()
    assert torch.equal(out, unflat(x)[0])
    optimizers = [torch.optim.Adam(m.parameters(), lr=0.05) for m in (module, unflat)]
    for m, opt in zip((module, unflat), optimizers):
        m(x)[0].square().sum().backward()
        opt.step()
    out = module(x)[0]
    assert slot._version > version and torch.equal(slot, effective_bias(module))
    assert spy.calls[-1][2].data_ptr() == slot.data_ptr()
    assert torch.equal(out, unflat(x)[0])
    for (name, p), q in zip(module.named_parameters(), unflat.parameters()):
        assert torch.equal(p, q), name


def test_after_a_backward_the_bias_is_rebuilt_into_the_slot_as_no_new_version(flat_on_cpu, monkeypatch):
    """A backward marks the effective bias for a rebuild (a ``.data`` write may follow it); the
    rebuild writes the slot through ``.data``: no new tensor (cuDNN would copy every weight of the
    layer per call) and no new version (a graph waiting for its backward is not broken)."""
    module, x = make(TIMESCALES), torch.randn(4, 2, 4)
    slot = memo(module)["slot"]
    spy = Spy(monkeypatch)
    for _ in range(3):
        module(x)[0].sum().backward()
    version = slot._version
    module.bias_hh_l0.data.add_(0.25)  # seen: a backward came before it
    module(x)
    assert all(call[2].data_ptr() == slot.data_ptr() for call in spy.calls)
    assert slot._version == version and torch.equal(slot, effective_bias(module))


@pytest.mark.parametrize("timescales", [None, TIMESCALES], ids=["plain", "mts"])
def test_a_data_write_before_a_waiting_backward_behaves_as_torch_nn_lstm(flat_on_cpu, timescales):
    """Forward, a ``.data`` write of every parameter (the older training loops), then that
    forward's backward: it runs (torch counts no new version), as torch.nn.LSTM's does, and gives
    torch.nn.LSTM's gradients (a bias is no input of the gradients)."""
    module, x = make(timescales), torch.randn(4, 2, 4)
    module(x)[0].sum().backward()  # a first step: the next rebuild follows a backward
    torch_lstm = torch.nn.LSTM(4, 6)
    torch_lstm.load_state_dict(module.state_dict(), strict=False)
    module.zero_grad()
    pending, theirs = module(x)[0], torch_lstm(x)[0]
    for m in (module, torch_lstm):
        for p in m.parameters():
            p.data.mul_(0.5)
    module(x)  # rebuilds the effective bias into the slot the pending graph saved
    pending.square().sum().backward()
    theirs.square().sum().backward()
    fixed = 0 if timescales is None else module.bias_fixed_l0.shape[0]  # rows that get no gradient
    for name, q in torch_lstm.named_parameters():
        want = q.grad.clone()
        if name.startswith("bias"):
            want[:fixed] = 0
        torch.testing.assert_close(getattr(module, name).grad, want, msg=name)


@pytest.mark.parametrize("freeze", ["gates", "all"])
def test_back_in_the_slot_after_other_tensors_the_fixed_rows_are_written(flat_on_cpu, freeze):
    """New tensors (a load with assign=True of other timescales) get a bias of their own; when the
    same tensors come again the slot, which still holds the old fixed rows, is written whole."""
    module, x = tsrnn.LSTM(4, 6, timescales=TIMESCALES, freeze=freeze, backend="onednn"), torch.randn(4, 2, 4)
    module(x)
    other = tsrnn.LSTM(4, 6, timescales=[torch.linspace(2.0, 9.0, 6)], freeze=freeze)
    module.load_state_dict(other.state_dict(), assign=True)
    module(x)[0].sum().backward()
    other.backend = "onednn"
    with torch.no_grad():
        torch.testing.assert_close(module(x)[0], other(x)[0], rtol=0, atol=0)


def test_a_graph_waiting_for_its_backward_keeps_its_bias(flat_on_cpu):
    """Two forwards, the first one's backward, a third forward (the effective bias is built again
    after a backward), then the second one's backward: the slot the second graph saved is written
    as no new version, and its gradients are those of a module that never flattened."""
    module, x = make(TIMESCALES), torch.randn(4, 2, 4)
    first, second = module(x)[0], module(x)[0]
    first.sum().backward()
    with torch.no_grad():
        module(x)
    module.zero_grad()
    second.square().sum().backward()
    plain = make(TIMESCALES)
    plain(x)[0].square().sum().backward()
    for (name, p), q in zip(module.named_parameters(), plain.parameters()):
        assert torch.equal(p.grad, q.grad), name


def test_a_cast_flattens_again(flat_on_cpu):
    module = make(TIMESCALES).double()
    x = torch.randn(4, 2, 4, dtype=torch.float64)
    slot = memo(module)["slot"]
    assert slot.dtype == torch.float64
    assert slot.untyped_storage().data_ptr() == module.weight_hh_l0.untyped_storage().data_ptr()
    out = module(x)[0]
    reference = make(TIMESCALES, backend="reference").double()
    torch.testing.assert_close(out, reference(x)[0])


def test_a_copy_and_a_pickled_module_are_flat_and_compute_the_same(flat_on_cpu):
    module = make(TIMESCALES)
    x = torch.randn(4, 2, 4)
    out = module(x)[0]
    out.sum().backward()  # the memo now holds hooks and weak references: not pickled
    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    for twin in (copy.deepcopy(module), torch.load(buffer, weights_only=False)):
        assert twin.weight_ih_l0.untyped_storage().data_ptr() != module.weight_ih_l0.untyped_storage().data_ptr()
        assert memo(twin)["slot"].untyped_storage().data_ptr() == twin.weight_hh_l0.untyped_storage().data_ptr()
        assert torch.equal(twin(x)[0], out)


@pytest.mark.parametrize("timescales", [None, TIMESCALES], ids=["plain", "mts"])
def test_new_bias_tensors_each_call_are_taken_as_new(timescales):
    """torch.func.functional_call with fresh biases each step (meta-learning, hypernetworks): each
    call computes with the biases it is given, whatever address or version they have."""
    module, x = make(timescales), torch.randn(4, 2, 4)
    for step in range(4):
        params = {name: torch.randn_like(p) for name, p in module.named_parameters() if name.startswith("bias")}
        got = torch.func.functional_call(module, params, (x,))[0]
        torch.testing.assert_close(got, by_hand(module, params, x), msg=f"step {step}")


def test_a_bias_handed_out_stays_what_it_was(monkeypatch):
    """``gate_biases`` hands out a plain tensor: a later optimizer step does not change what a
    functional call with it computes, and autograd reaches it."""
    module = make()
    x, h0, c0 = torch.randn(5, 2, 4), torch.zeros(2, 6), torch.zeros(2, 6)
    bias = module.gate_biases(0)
    kept = bias.detach().clone()
    with torch.no_grad():
        module.bias_ih_l0.add_(1.0)
    weights = (module.weight_ih_l0.detach(), module.weight_hh_l0.detach())
    out = tsrnn.functional.lstm(x, h0, c0, *weights, bias, backend="onednn")[0]
    want = tsrnn.functional.lstm(x, h0, c0, *weights, kept, backend="reference")[0]
    torch.testing.assert_close(out, want)
    (grad,) = torch.autograd.grad(out.sum(), bias)
    assert grad.abs().sum() > 0


def test_a_write_into_a_handed_out_effective_bias_is_seen():
    """An MTS layer's ``gate_biases`` is a view of its memo (torch lets one write into it only
    detached): the module builds its effective bias again."""
    module, x = make(TIMESCALES), torch.randn(5, 2, 4)
    module(x)
    with torch.no_grad():
        module.gate_biases(0).detach().add_(0.5)
    assert same_function(module, TIMESCALES, x)


def test_a_new_tensor_at_an_old_tensors_address_and_version_is_taken_as_new():
    """Biases read from one numpy buffer rewritten between calls: each call's tensors have the same
    address and version as the last call's, and are still new tensors with new values."""
    np = pytest.importorskip("numpy")
    module, x = make(TIMESCALES), torch.randn(4, 2, 4)
    buffers = {name: np.zeros(p.shape, dtype=np.float32) for name, p in module.named_parameters()
               if name.startswith("bias")}
    for step in range(3):
        for array in buffers.values():
            array[:] = np.random.default_rng(step).standard_normal(array.shape)
        params = {name: torch.from_numpy(array) for name, array in buffers.items()}
        with torch.no_grad():
            got = torch.func.functional_call(module, params, (x,))[0]
        torch.testing.assert_close(got, by_hand(module, params, x), msg=f"step {step}")


def test_a_layout_that_fails_leaves_the_layer_as_it_was(monkeypatch):
    """Where torch's flattening raises (a cuDNN error), the module keeps separate tensors and says so."""
    def fails(tensors, input_size, hidden_size, proj_size):
        raise RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED")

    monkeypatch.setattr(lstm_module, "_flat_layout", lambda tensors: fails)
    with pytest.warns(RuntimeWarning, match="could not be laid out.*CUDNN_STATUS_NOT_SUPPORTED"):
        module = make(TIMESCALES)
    x = torch.randn(4, 2, 4)
    monkeypatch.undo()
    assert same_function(module, TIMESCALES, x) and "slot" not in memo(module)


@pytest.mark.parametrize("options", [{"bidirectional": True}, {"proj_size": 3}, {"bidirectional": True, "proj_size": 3}],
                         ids=str)
@pytest.mark.parametrize("timescales", [None, TIMESCALES], ids=["plain", "mts"])
def test_each_direction_is_one_buffer_with_its_projection_last(flat_on_cpu, monkeypatch, options, timescales):
    """A bidirectional or projected layer: one buffer per layer and direction, W_hr after the two
    bias vectors (cuDNN's order), torch's kernel handed the buffer's views, the same function."""
    torch.manual_seed(0)
    module = tsrnn.LSTM(4, 6, 2, backend="onednn", timescales=None if timescales is None else [timescales[0], None],
                        **options)
    directions = ("", "_reverse") if options.get("bidirectional") else ("",)
    for k in range(2):
        for suffix in directions:
            names = [f"{w}_l{k}{suffix}" for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr")]
            tensors = [getattr(module, n) for n in names if hasattr(module, n)]
            storages = {t.untyped_storage().data_ptr() for t in tensors}
            assert len(storages) == (3 if k == 0 and timescales is not None else 1), (k, suffix)  # b_ih, b_hh apart
            if options.get("proj_size") and not (k == 0 and timescales is not None):
                assert tensors[-1].storage_offset() == sum(t.numel() for t in tensors[:-1])
    spy = Spy(monkeypatch)
    x = torch.randn(5, 2, 4)
    out = module(x)[0]
    assert len(spy.calls) == 2 * len(directions)
    if options.get("proj_size"):
        assert spy.calls[0][-1] is module.weight_hr_l0
    want = module.to_torch()(x)[0]  # an MTS layer's bias summed in another order: equal to rounding
    assert torch.equal(out, want) if timescales is None else torch.allclose(out, want, rtol=1e-5, atol=1e-6)
