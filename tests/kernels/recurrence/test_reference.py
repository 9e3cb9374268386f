"""The references against the equations themselves: S9 age form against the literal S7/S8 loop
with absolute and reference times, closed forms, and gradcheck."""
import pytest
import torch

from tsrnn import reference, testing
from tsrnn.ops.recurrence import cells, export_scan as scan_layer
from tsrnn.testing import layer_args


@pytest.mark.parametrize("input_gate", ["coupled", "separate"])
@pytest.mark.parametrize("with_dt", [False, True])
def test_age_form_equals_literal_time_loop(input_gate, with_dt):
    args = {**layer_args(f"plstm_{input_gate}", T=60, B=3, I=4, H=5, seed=1, dt=with_dt), "input_gate": input_gate}
    args["a0"] = torch.zeros_like(args["c0"])  # the literal loop starts from k_0 = t_0 = 0
    out, (h, c, a), forget = reference.plstm(**args)
    literal_args = {k: v for k, v in args.items() if k != "a0"}
    out_lit, (h_lit, c_lit, k, t), forget_lit = reference.plstm_literal(**literal_args)
    torch.testing.assert_close(out, out_lit, atol=1e-12, rtol=0)
    torch.testing.assert_close(forget, forget_lit, atol=1e-12, rtol=0)
    torch.testing.assert_close(c, c_lit, atol=1e-12, rtol=0)
    torch.testing.assert_close(a, t - k, atol=1e-9, rtol=0)


def test_literal_loop_with_unit_dt_is_s7():
    """(S8) with Δt = 1 everywhere is (S7): passing dt = 1 changes nothing."""
    args = layer_args("plstm_coupled", T=20, B=2, I=3, H=4, seed=2)
    literal = {k: v for k, v in args.items() if k != "a0"}
    out, *_ = reference.plstm_literal(**literal)
    out_dt, *_ = reference.plstm_literal(**{**literal, "dt": torch.ones(20, 2, dtype=torch.float64)})
    torch.testing.assert_close(out, out_dt, atol=0, rtol=0)


def test_age_form_keeps_precision_where_the_clock_does_not():
    """In float32 the literal loop subtracts times near t; the age form does not, so at t ~ 1e4
    the age form stays near the float64 answer while the literal form drifts."""
    args = layer_args("plstm_coupled", T=3000, B=1, I=2, H=4, seed=3)
    args["a0"] = torch.zeros_like(args["c0"])
    args["dt"] = torch.full((3000, 1), 4.0, dtype=torch.float64)  # t reaches 12,000
    exact = reference.plstm(**args)[2]
    f32 = {k: (v.float() if isinstance(v, torch.Tensor) else v) for k, v in args.items()}
    age_err = (reference.plstm(**f32)[2].double() - exact).abs().max().item()
    literal = {k: v for k, v in f32.items() if k != "a0"}
    literal_err = (reference.plstm_literal(**literal)[2].double() - exact).abs().max().item()
    assert age_err < 1e-5
    assert literal_err > 10 * age_err


def test_lstm_reference_is_torch_lstm():
    torch.manual_seed(0)
    ref = torch.nn.LSTM(5, 7, dtype=torch.float64)
    x = torch.randn(9, 3, 5, dtype=torch.float64)
    h0, c0 = torch.randn(1, 3, 7, dtype=torch.float64), torch.randn(1, 3, 7, dtype=torch.float64)
    out, (h, c) = ref(x, (h0, c0))
    bias = ref.bias_ih_l0 + ref.bias_hh_l0
    out_r, (h_r, c_r), _ = reference.lstm(x, h0[0], c0[0], ref.weight_ih_l0, ref.weight_hh_l0, bias)
    torch.testing.assert_close(out_r, out, atol=1e-12, rtol=0)
    torch.testing.assert_close(c_r, c[0], atol=1e-12, rtol=0)


def test_linear_scan_reference_closed_form():
    a = torch.full((6, 2), 0.5, dtype=torch.float64)
    u = torch.ones(6, 2, dtype=torch.float64)
    x = reference.linear_scan(a, u)
    expected = 2 * (1 - 0.5 ** torch.arange(1, 7, dtype=torch.float64))  # geometric series
    torch.testing.assert_close(x[:, 0], expected)
    # constant a broadcasts, and x0 starts the recurrence
    x0 = torch.tensor([1.0, -1.0], dtype=torch.float64)
    torch.testing.assert_close(reference.linear_scan(torch.tensor(0.5, dtype=torch.float64), u, x0)[0],
                               0.5 * x0 + 1)


@pytest.mark.parametrize("cell", ["lstm", "plstm_coupled", "plstm_separate"])
def test_reference_gradcheck(cell):
    args = layer_args(cell, T=3, B=2, I=3, H=2, seed=4, dt=True)
    names = testing.differentiable(args)

    def f(*tensors):
        out, state = testing.reference_layer(cell, {**args, **dict(zip(names, tensors))})
        return out, *state

    inputs = tuple(args[k].clone().requires_grad_() for k in names)
    assert torch.autograd.gradcheck(f, inputs)


@pytest.mark.parametrize("cell", list(cells.CELLS))
@pytest.mark.parametrize("dt", [False, True])
def test_the_scan_layer_is_the_reference_loop(cell, dt):
    """tsrnn.ops.recurrence.export_scan (what torch.export records) runs the reference step: equal in float64."""
    named = testing.recurrence_args(cell, testing.layer_args(cell, 7, 3, 4, 6, seed=5, dt=dt))
    described = cells.get(cell)
    out, finals = scan_layer.layer(described, **named)
    expected, expected_finals, _ = reference.layer(described, **named)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    for a, b in zip(finals, expected_finals):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
