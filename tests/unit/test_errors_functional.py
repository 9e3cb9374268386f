"""docs/equations.md §8 through the functional API (functional.lstm, functional.plstm,
functional.linear_scan): every bad argument raises the documented exception type (ValueError for a
bad value or shape, TypeError for a bad type or dtype) with a message that names the argument.

The modules' errors: test_errors_modules.py; the compiled operators': test_errors_ops.py.
"""
import pytest
import torch

from tsrnn import functional
from tsrnn import testing
from conftest import needs_native

NAN, INF = float("nan"), float("inf")


# --------------------------------------------------------------------------------------------
# functional.lstm / functional.plstm
# --------------------------------------------------------------------------------------------
FT, FB, FI, FH = 4, 3, 5, 6


def _replace(name, fn):
    return lambda args: {**args, name: fn(args[name])}


FUNCTIONAL_CASES = {
    # id: (cells, mutate(args) -> args, exception, match)
    "x-2d": (None, _replace("x", lambda v: v[0]), ValueError, r"x must have 3 dimensions"),
    "x-int": (None, _replace("x", lambda v: v.long()), TypeError, r"x must be a floating-point tensor"),
    "x-not-tensor": (None, _replace("x", lambda v: v.tolist()), TypeError, r"x must be a torch.Tensor"),
    "x-no-steps": (None, _replace("x", lambda v: v[:0]), ValueError, r"x must have at least one step"),
    "w_ih-columns": (None, _replace("w_ih", lambda v: v[:, :-1]), ValueError,
                     r"w_ih must have shape \(\d+, 5\), got \(\d+, 4\)"),
    "w_ih-rows": (None, _replace("w_ih", lambda v: v[:-1]), ValueError, r"w_ih must have shape"),
    "w_ih-1d": (None, _replace("w_ih", lambda v: v[0]), ValueError, r"w_ih must have 2 dimensions"),
    "w_hh-rows": (None, _replace("w_hh", lambda v: v[:-1]), ValueError, r"w_hh must have shape \(\d+, 6\)"),
    "w_hh-1d": (None, _replace("w_hh", lambda v: v.flatten()), ValueError, r"w_hh must have 2 dimensions"),
    "bias-length": (None, _replace("bias", lambda v: v[:-1]), ValueError, r"bias must have shape"),
    "bias-2d": (None, _replace("bias", lambda v: v[None]), ValueError, r"bias must have 1 dimensions"),
    "h0-batch": (None, _replace("h0", lambda v: v[:-1]), ValueError, r"h0 must have shape \(3, 6\), got \(2, 6\)"),
    "h0-3d": (None, _replace("h0", lambda v: v[None]), ValueError, r"h0 must have 2 dimensions"),
    "c0-hidden": (None, _replace("c0", lambda v: v[:, :-1]), ValueError, r"c0 must have shape \(3, 6\), got \(3, 5\)"),
    "w_ih-dtype": (None, _replace("w_ih", lambda v: v.float()), TypeError, r"w_ih has dtype torch.float32 but x"),
    "w_hh-dtype": (None, _replace("w_hh", lambda v: v.float()), TypeError, r"w_hh has dtype torch.float32 but x"),
    "bias-dtype": (None, _replace("bias", lambda v: v.float()), TypeError, r"bias has dtype torch.float32 but x"),
    "w_hh-device": (None, _replace("w_hh", lambda v: v.to("meta")), ValueError, r"w_hh is on meta but x is on cpu"),
    "c0-device": (None, _replace("c0", lambda v: v.to("meta")), ValueError, r"c0 is on meta but x is on cpu"),
    "backend": (None, lambda a: {**a, "backend": "cuda-magic"}, ValueError, r"backend must be one of"),
    "a0-shape": ("plstm", _replace("a0", lambda v: v[:, :-1]), ValueError, r"a0 must have shape \(3, 6\)"),
    "a0-device": ("plstm", _replace("a0", lambda v: v.to("meta")), ValueError, r"a0 is on meta"),
    "p-length": ("plstm", _replace("p", lambda v: v[:-1]), ValueError, r"p must have shape \(6,\), got \(5,\)"),
    "p-2d": ("plstm", _replace("p", lambda v: v[None]), ValueError, r"p must have 1 dimensions"),
    "p-device": ("plstm", _replace("p", lambda v: v.to("meta")), ValueError, r"p is on meta"),
    "p-negative": ("plstm", _replace("p", lambda v: v - 2), ValueError, r"p must be > 0, got minimum -"),
    "p-zero": ("plstm", _replace("p", lambda v: torch.zeros_like(v)), ValueError, r"p must be > 0, got minimum 0"),
    "p-nan": ("plstm", _replace("p", lambda v: torch.full_like(v, NAN)), ValueError, r"p must be finite"),
    "p-inf": ("plstm", _replace("p", lambda v: v.index_fill(0, torch.tensor([2]), INF)), ValueError,
              r"p must be finite"),
    "dt-shape": ("plstm", lambda a: {**a, "dt": torch.ones(FT, FB + 1, dtype=torch.float64)}, ValueError,
                 r"dt must have shape \(4, 3\), got \(4, 4\)"),
    "dt-3d-shape": ("plstm", lambda a: {**a, "dt": torch.ones(FT, FB, 2, dtype=torch.float64)}, ValueError,
                    r"dt must have shape \(4, 3, 1\)"),
    "dt-negative": ("plstm", lambda a: {**a, "dt": -torch.ones(FT, FB, dtype=torch.float64)}, ValueError,
                    r"dt must be > 0"),
    "dt-nan": ("plstm", lambda a: {**a, "dt": torch.full((FT, FB), NAN, dtype=torch.float64)}, ValueError,
               r"dt must be finite"),
    "eps-zero": ("plstm", lambda a: {**a, "eps": 0.0}, ValueError, r"eps must be > 0"),
    "eps-negative": ("plstm", lambda a: {**a, "eps": -1.0}, ValueError, r"eps must be > 0"),
    "eps-nan": ("plstm", lambda a: {**a, "eps": NAN}, ValueError, r"eps"),
    "input_gate": ("plstm", lambda a: {**a, "input_gate": "x"}, ValueError, r"input_gate must be one of"),
    "gate-count": ("plstm", lambda a: {**a, "input_gate": "separate" if a["input_gate"] == "coupled" else "coupled"},
                   ValueError, r"w_hh must have shape"),
}


def _functional_params():
    for case, (cells, *_rest) in FUNCTIONAL_CASES.items():
        if cells is None:  # every cell shares these checks: run them on lstm and one pLSTM
            chosen = ("lstm", "plstm_separate")
        else:
            chosen = ("plstm_coupled", "plstm_separate") if case == "gate-count" else ("plstm_coupled",)
        for cell in chosen:
            yield pytest.param(cell, case, id=f"{cell}-{case}")


def layer_args(cell, *shape):
    """``testing.layer_args`` as the keyword arguments of functional.lstm / functional.plstm."""
    args = testing.layer_args(cell, *shape)
    if cell != "lstm":
        args["input_gate"] = cell.removeprefix("plstm_")
    return args


def call_layer(cell, args):
    fn = functional.lstm if cell == "lstm" else functional.plstm
    return fn(**args)


@pytest.mark.parametrize("cell, case", list(_functional_params()))
def test_functional_layer_errors(cell, case):
    _, mutate, exc, match = FUNCTIONAL_CASES[case]
    args = layer_args(cell, FT, FB, FI, FH)
    call_layer(cell, args)  # the unmodified arguments are fine
    with pytest.raises(exc, match=match):
        call_layer(cell, mutate(args))


@pytest.mark.parametrize("backend", [
    "reference",
    pytest.param("native", marks=needs_native),
])
def test_functional_plstm_requires_p(backend):
    args = layer_args("plstm_coupled", FT, FB, FI, FH)
    with pytest.raises((TypeError, ValueError, RuntimeError), match=r"\bp (must be a torch.Tensor|is required)"):
        functional.plstm(**{**args, "p": None, "backend": backend})


@pytest.mark.parametrize("backend", ["reference", pytest.param("native", marks=needs_native)])
@pytest.mark.parametrize("cell", ["lstm", "plstm_coupled"])
def test_functional_state_dtype_must_match_x(cell, backend):
    args = layer_args(cell, FT, FB, FI, FH)
    args["c0"] = args["c0"].float()
    with pytest.raises(TypeError, match=r"c0"):
        call_layer(cell, {**args, "backend": backend})


def test_functional_plstm_p_value_check_is_skipped_inside_transforms():
    """p > 0 is a value check: inside torch.func transforms (vmap over p here) it is skipped, as
    for dt, and each row gives what its own call gives."""
    args = layer_args("plstm_coupled", FT, FB, FI, FH)
    ps = torch.stack([args["p"], args["p"].flip(0)])
    batched = torch.func.vmap(lambda p: functional.plstm(**{**args, "p": p})[0])(ps)
    for k in range(2):
        torch.testing.assert_close(batched[k], functional.plstm(**{**args, "p": ps[k]})[0])


@pytest.mark.parametrize("eps", [INF, "1e-3"])
def test_functional_plstm_eps_checked_like_the_module(eps):
    args = layer_args("plstm_coupled", FT, FB, FI, FH)
    with pytest.raises((ValueError, TypeError), match=r"eps"):
        out, _ = functional.plstm(**{**args, "eps": eps})
        assert torch.isfinite(out).all()  # reached only without the check


# --------------------------------------------------------------------------------------------
# functional.linear_scan
# --------------------------------------------------------------------------------------------
SCAN_CASES = {
    # id: (a, u, x0, exception, match)
    "a-not-broadcastable": (lambda: torch.rand(4, 3), lambda: torch.randn(4, 2), None, ValueError,
                            r"a of shape \(4, 3\) does not broadcast to u \(4, 2\)"),
    "a-more-dims": (lambda: torch.rand(2, 4, 2), lambda: torch.randn(4, 2), None, ValueError,
                    r"a of shape \(2, 4, 2\) does not broadcast"),
    "a-float": (lambda: 0.5, lambda: torch.randn(4, 2), None, TypeError, r"a must be a torch.Tensor"),
    "a-int": (lambda: torch.ones(4, 2, dtype=torch.int64), lambda: torch.randn(4, 2), None, TypeError,
              r"a must be a floating-point tensor"),
    "u-int": (lambda: torch.rand(4, 2), lambda: torch.ones(4, 2, dtype=torch.int32), None, TypeError,
              r"u must be a floating-point tensor"),
    "u-no-steps": (lambda: torch.rand(0, 2), lambda: torch.randn(0, 2), None, ValueError, r"u must be \(T, \.\.\.\) with T >= 1"),
    "u-0d": (lambda: torch.rand(()), lambda: torch.randn(()), None, ValueError, r"u must be \(T, \.\.\.\)"),
    "x0-shape": (lambda: torch.rand(4, 2), lambda: torch.randn(4, 2), lambda: torch.zeros(3), ValueError,
                 r"x0 must have shape \(2,\), got \(3,\)"),
    "x0-with-time": (lambda: torch.rand(4, 2), lambda: torch.randn(4, 2), lambda: torch.zeros(4, 2), ValueError,
                     r"x0 must have shape \(2,\), got \(4, 2\)"),
    "x0-broadcastable": (lambda: torch.rand(4, 2), lambda: torch.randn(4, 2), lambda: torch.zeros(1), ValueError,
                         r"x0 must have shape \(2,\)"),
    "x0-int": (lambda: torch.rand(4, 2), lambda: torch.randn(4, 2), lambda: torch.zeros(2, dtype=torch.int64),
               TypeError, r"x0 must be a floating-point tensor"),
    "a-dtype": (lambda: torch.rand(4, 2, dtype=torch.float64), lambda: torch.randn(4, 2), None, TypeError,
                r"a has dtype torch.float64 but u has torch.float32"),
    "x0-dtype": (lambda: torch.rand(4, 2), lambda: torch.randn(4, 2), lambda: torch.zeros(2, dtype=torch.float64),
                 TypeError, r"x0 has dtype torch.float64 but u has torch.float32"),
    "a-device": (lambda: torch.rand(4, 2, device="meta"), lambda: torch.randn(4, 2), None, ValueError,
                 r"a is on meta but u is on cpu"),
    "x0-device": (lambda: torch.rand(4, 2), lambda: torch.randn(4, 2), lambda: torch.zeros(2, device="meta"),
                  ValueError, r"x0 is on meta but u is on cpu"),
}


@pytest.mark.parametrize("case", SCAN_CASES)
def test_linear_scan_errors(case):
    make_a, make_u, make_x0, exc, match = SCAN_CASES[case]
    x0 = None if make_x0 is None else make_x0()
    backend = "reference" if case.startswith("x0") else "auto"  # checks run before either path
    with pytest.raises(exc, match=match):
        functional.linear_scan(make_a(), make_u(), x0, backend=backend)


def test_linear_scan_bad_backend():
    a, u = torch.rand(4, 2), torch.randn(4, 2)
    functional.linear_scan(a, u)
    with pytest.raises(ValueError, match=r"backend must be one of"):
        functional.linear_scan(a, u, backend="cuda-magic")
