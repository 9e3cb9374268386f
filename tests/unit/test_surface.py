"""The rest of torch.nn.LSTM's surface: flatten_parameters, torch.jit.trace (a traced module runs
other lengths and batch sizes, and trains), torch.jit.script (a clear error that points to trace
and compile), and the error for an initial state with a missing entry."""
import pytest
import torch

import tsrnn

MODULES = {
    "lstm": lambda: tsrnn.LSTM(3, 5, 2),
    "mts": lambda: tsrnn.LSTM(3, 5, timescales=[torch.linspace(1.0, 20.0, 5)]),
    "plstm": lambda: tsrnn.PowerLawLSTM(3, 5),
    "plstm_separate": lambda: tsrnn.PowerLawLSTM(3, 5, input_gate="separate"),
}


@pytest.mark.parametrize("kind", list(MODULES))
def test_flatten_parameters_on_the_cpu_changes_nothing(kind):
    torch.manual_seed(0)
    module = MODULES[kind]()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    x = torch.randn(4, 2, 3)
    out = module(x)[0]
    assert module.flatten_parameters() is None
    assert all(torch.equal(v, before[k]) for k, v in module.state_dict().items())
    assert torch.equal(module(x)[0], out)


@pytest.mark.parametrize("kind", list(MODULES))
def test_jit_trace_runs_other_shapes_and_trains(kind, clean_backend_state):
    torch.manual_seed(0)
    module = MODULES[kind]()
    traced = torch.jit.trace(module, (torch.randn(6, 2, 3),))
    x = torch.randn(9, 4, 3)
    out, state = traced(x)
    expected, expected_state = module(x)
    torch.testing.assert_close(out, expected)
    for s, e in zip(state, expected_state):
        torch.testing.assert_close(s, e)
    out.square().sum().backward()
    grads = {k: p.grad.clone() for k, p in module.named_parameters()}
    module.zero_grad()
    module(x)[0].square().sum().backward()
    for k, p in module.named_parameters():
        if p.grad is not None or grads[k] is not None:
            torch.testing.assert_close(grads[k], p.grad, msg=k)


@pytest.mark.parametrize("kind", ["lstm", "plstm"])
def test_jit_script_is_a_clear_error(kind):
    with pytest.raises(RuntimeError, match="torch.jit.script cannot compile .* use torch.jit.trace, torch.compile"):
        torch.jit.script(MODULES[kind]())


def test_plstm_state_with_a_missing_entry_names_it():
    module = tsrnn.PowerLawLSTM(3, 5)
    x = torch.randn(4, 2, 3)
    h0 = torch.zeros(1, 2, 5)
    with pytest.raises(TypeError, match=r"must be a tuple \(h0, c0, a0\), got 2 entries: a0 is missing"):
        module(x, (h0, h0))
    with pytest.raises(TypeError, match=r"must be a tuple \(h0, c0, a0\), got 4 entries$"):
        module(x, [h0, h0, h0, h0])
    with pytest.raises(TypeError, match=r"must be a tuple \(h0, c0, a0\), got 1 entry: c0, a0 are missing"):
        module(x, (h0,))
    with pytest.raises(TypeError, match=r"must be a tuple \(h0, c0\), got Tensor"):
        tsrnn.LSTM(3, 5)(x, h0)
