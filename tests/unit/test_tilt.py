"""TILT (docs/equations.md §5): the grid, every fast path against the literal S11-S12 reference, resets,
streaming state, the one-hot equivalence, float32 error by k, and the parameter errors."""
import math
import re
import warnings

import pytest
import torch

import tsrnn
from tsrnn import reference
from tsrnn.memory import laplace
from tsrnn.testing import TOLERANCE
from conftest import assert_close

PATHS = ["scan", "chunked", "fft"]
F64 = TOLERANCE["tilt float64"]
# The path tests use small, coarse grids on purpose (exact filters all the same): TILT's warning
# that k is too large for them is tested below, not repeated here.
pytestmark = pytest.mark.filterwarnings(r"ignore:tsrnn\.TILT. k=\d+ on the τ\* grid:UserWarning")


def rel_err(y, y_ref):
    return ((y.double() - y_ref.double()).abs().max() / y_ref.double().abs().max()).item()


def inputs(T=70, B=3, D=4, seed=0, reset_p=0.0):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(T, B, D, generator=g, dtype=torch.float64)
    reset = (torch.rand(T, B, generator=g) < reset_p) if reset_p else None
    return u, reset


def test_grid_matches_spec_numbers():
    grid = laplace.grid(30, 1.0, 50.0, 4)
    assert abs(grid.c - 0.144419) < 1e-6
    assert grid.s.shape == (38,)
    assert abs(grid.s[0].item() - 6.8612) < 1e-4 and abs(grid.s[-1].item() - 0.046639) < 1e-6
    tilt = tsrnn.TILT()
    torch.testing.assert_close(tilt.tau_star[[0, -1]], torch.tensor([1.0, 50.0], dtype=torch.float64))


def test_derivative_matrix_is_exact_on_quadratics():
    s = laplace.grid(6, 1.0, 20.0, 2).s
    D = laplace.derivative_matrix(s)
    torch.testing.assert_close((D @ (3 * s**2 + s))[1:-1], (6 * s + 1)[1:-1])  # 3-point rule: exact for degree 2
    assert D[0].abs().sum() == 0 and D[-1].abs().sum() == 0


@pytest.mark.parametrize("method", PATHS)
@pytest.mark.parametrize("k,g,integrate", [(4, 0.0, "exact"), (1, 1.0, "unit"), (7, 0.5, "exact")])
def test_paths_match_literal_reference(method, k, g, integrate):
    u, _ = inputs(T=45, seed=k)
    params = dict(n_taus=6, tau_min=1.0, tau_max=20.0, k=k, g=g, dt=0.7, integrate=integrate)
    y_ref, F_ref = reference.tilt(u, **params)
    y, F = tsrnn.TILT(**params, method=method, chunk=16)(u)
    assert y.shape == (45, 3, 6, 4)
    assert_close(y, y_ref, F64, f"{method} y")
    assert_close(F, F_ref, F64, f"{method} state")


@pytest.mark.parametrize("method", ["scan", "chunked"])
def test_resets_match_reference_and_restart_the_history(method):
    u, reset = inputs(T=60, B=4, seed=1, reset_p=0.08)
    reset[0, 0] = True
    reset[17, 1] = True
    y_ref, _ = reference.tilt(u, n_taus=5, tau_max=30.0, reset=reset)
    tilt = tsrnn.TILT(n_taus=5, tau_max=30.0, method=method, chunk=16)
    y, _ = tilt(u, reset=reset)
    assert_close(y, y_ref, F64, "y with resets")
    # after a reset, the output equals a fresh start on the remaining steps
    fresh, _ = tilt(u[17:, 1:2])
    next_reset = int(reset[18:, 1].nonzero()[0]) + 18 if reset[18:, 1].any() else 60
    assert_close(y[17:next_reset, 1:2], fresh[: next_reset - 17], F64, "fresh start")


@pytest.mark.parametrize("method", PATHS)
def test_streaming_state_equals_one_pass(method):
    u, _ = inputs(T=90, seed=2)
    tilt = tsrnn.TILT(n_taus=7, method=method, chunk=16)
    y, F = tilt(u)
    y1, F1 = tilt(u[:33])
    y2, F2 = tilt(u[33:], state=F1)
    assert_close(torch.cat([y1, y2]), y, F64, "streamed y")
    assert_close(F2, F, F64, "streamed state")


def test_one_hot_over_vocabulary_equals_embeddings():
    """(S11)-(S12) are linear: TILT(one-hot) @ E == TILT(one-hot @ E), V/D times cheaper."""
    g = torch.Generator().manual_seed(3)
    V, D, T, B = 50, 6, 40, 2
    words = torch.randint(V, (T, B), generator=g)
    E = torch.randn(V, D, generator=g, dtype=torch.float64)
    one_hot = torch.nn.functional.one_hot(words, V).double()
    tilt = tsrnn.TILT(n_taus=5, tau_max=25.0)
    y_vocab, _ = tilt(one_hot)
    y_embed, _ = tilt(E[words])
    assert_close(y_vocab @ E, y_embed, F64, "one-hot")


def test_kernels_are_the_impulse_response_and_peak_near_tau():
    tilt = tsrnn.TILT(g=1.0)
    impulse = torch.zeros(200, 1, 1, dtype=torch.float64)
    impulse[0] = 1
    y, _ = tilt(impulse)
    kernels = tilt.kernels(200)
    assert_close(y[:, 0, :, 0].T, kernels, F64, "impulse response")
    peaks = kernels.argmax(1).double()
    assert ((peaks - tilt.tau_star).abs() <= 0.25 * tilt.tau_star + 1).all()
    # continuous peak k^{k+1} e^{-k} / k! = 0.78 for k = 4; the 3-point derivative on this grid
    # (c = 0.144) gives 0.82-0.84 (measured), within 10%
    expected = 4 ** 5 * math.exp(-4) / math.factorial(4)
    heights = kernels[10:].max(1).values
    assert ((heights - expected).abs() < 0.1 * expected).all()


@pytest.mark.parametrize("k", [4, 12, 24])
def test_float32_error_of_the_kernel_paths_stays_near_1e7(k):
    """The kernels are built in float64, so float32 keeps ~1e-7 for any k (the scan's k-th
    difference in float32 loses digits as k grows: reported, not asserted, in RESULTS.md)."""
    u, _ = inputs(T=150, B=2, D=3, seed=4)
    u = u.float().double()
    tilt = tsrnn.TILT(n_taus=12, k=k, chunk=32)
    y64, _ = tilt(u)
    for method in ["chunked", "fft"]:
        tilt.method = method
        y32, _ = tilt(u.float())
        assert y32.dtype == torch.float32
        assert_close(y32, y64, TOLERANCE["tilt float32"], method)
    tilt.method = "scan"
    assert rel_err(tilt(u.float())[0], y64) > 1e-6  # the loss the kernel form avoids


@pytest.mark.parametrize("method", PATHS)
def test_gradients_match_reference(method):
    u, _ = inputs(T=20, B=2, D=2, seed=5)
    state = torch.randn(2, 4 + 2 * 2, 2, dtype=torch.float64)
    params = dict(n_taus=4, tau_max=10.0, k=2)
    u1, s1 = u.clone().requires_grad_(), state.clone().requires_grad_()
    u2, s2 = u.clone().requires_grad_(), state.clone().requires_grad_()
    w = torch.randn(20, 2, 4, 2, dtype=torch.float64)
    (tsrnn.TILT(**params, method=method, chunk=8)(u1, state=s1)[0] * w).sum().backward()
    (reference.tilt(u2, **params, state=s2)[0] * w).sum().backward()
    assert_close(u1.grad, u2.grad, F64, "grad u")
    assert_close(s1.grad, s2.grad, F64, "grad state")
    assert torch.autograd.gradcheck(lambda x: tsrnn.TILT(**params, method=method, chunk=8)(x)[0], (u1[:9].detach().requires_grad_(),))


def test_batch_first_and_module_casts():
    u, reset = inputs(T=30, B=2, seed=6, reset_p=0.1)
    tilt = tsrnn.TILT(n_taus=4)
    y, _ = tilt(u, reset=reset)
    y_bf, _ = tsrnn.TILT(n_taus=4, batch_first=True)(u.transpose(0, 1), reset=reset.T)
    assert_close(y_bf.transpose(0, 1), y, F64, "batch_first")
    tilt.float()
    assert tilt.post.dtype == torch.float64  # the operator stays float64
    assert tilt(u.float())[0].dtype == torch.float32
    assert tilt(u.to(torch.bfloat16))[0].dtype == torch.bfloat16


@pytest.mark.parametrize("kwargs,error,match", [
    ({"tau_min": 5.0, "tau_max": 5.0}, ValueError, "tau_min must be < tau_max"),
    ({"tau_min": 9.0, "tau_max": 2.0}, ValueError, "tau_min must be < tau_max"),
    ({"n_taus": 1}, ValueError, "n_taus must be >= 2"),
    ({"k": 0}, ValueError, "k must be >= 1"),
    ({"dt": 0.0}, ValueError, "dt must be > 0"),
    ({"dt": -1.0}, ValueError, "dt must be > 0"),
    ({"tau_min": float("nan")}, ValueError, "tau_min must be finite"),
    ({"g": float("inf")}, ValueError, "g must be finite"),
    ({"integrate": "euler"}, ValueError, "integrate must be one of"),
    ({"method": "magic"}, ValueError, "method must be one of"),
    ({"n_taus": 2.5}, TypeError, "n_taus must be an int"),
])
def test_parameter_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        tsrnn.TILT(**kwargs)


def test_the_default_and_the_papers_grids_are_silent():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k in (1, 4, 5, 6):  # 30 τ* over [1, 50]: mass 1.02, 1.22, 1.39, 1.63
            tsrnn.TILT(k=k)
        tsrnn.TILTContext(5)  # seed 004: c = 0.1, k = 4 (mass 1.11)
        tsrnn.TILTBufferContext(3)


def test_k_too_large_for_the_grid_warns_once_naming_the_mass_and_the_largest_k():
    """k = 16 on the default grid: receptive fields of mass 193 instead of 1, warned once at
    construction (not per call), naming a τ*, its mass and the largest k within [0.5, 2] (6 here)."""
    with pytest.warns(UserWarning) as warned:
        tilt = tsrnn.TILT(k=16)
    assert len(warned) == 1 and warned[0].filename == __file__
    assert str(warned[0].message) == (
        "tsrnn.TILT: k=16 on the τ* grid n_taus=30, tau_min=1.0, tau_max=50.0 (growth c=0.144 per τ*): 30 of the "
        "30 receptive fields have a mass Σ_j g(j) outside [0.5, 2]; τ*=1 (slot 0) has 192.9; k <= 6 keeps every "
        "mass in [0.5, 2] on this grid; a finer grid (more n_taus over the same range) brings it closer to 1 at "
        "any k")
    assert torch.allclose(tilt.kernels(5000).sum(1), torch.full((30,), 192.9, dtype=torch.float64), rtol=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tilt(torch.randn(20, 2, 3))
    with pytest.warns(UserWarning, match=r"outside \[0.5, 2\] τ\*\^g; τ\*=1 \(slot 0\) has 192.9 τ\*\^g"):
        tsrnn.TILT(k=16, g=1.0)  # relative to τ*^g
    with pytest.warns(UserWarning, match=r"has 1.761e\+04; no k keeps every mass in \[0.5, 2\] on this grid"):
        tsrnn.TILT(n_taus=4)  # growth c = 2.68: even k = 1 gives mass 2.96
    with pytest.warns(UserWarning, match=r"has 12.24; no k keeps .*; integrate='exact' .* keeps every mass"):
        tsrnn.TILT(integrate="unit", dt=0.1)  # β = 1: each step adds 1, about 1/Δ per unit of time


@pytest.mark.parametrize("grid, largest", [
    ({}, 6),  # c = 0.144
    ({"n_taus": 12}, 2),  # c = 0.427
    ({"n_taus": 8}, 1),  # c = 0.749
    ({"n_taus": 100}, 18),  # c = 0.040
    ({"n_taus": 25, "tau_max": 1.1 ** 24}, 9),  # seed 004's fine grid, c = 0.1
])
def test_the_largest_k_in_range_is_computed_for_the_grid(grid, largest):
    """The named k is the grid's: it is silent and its receptive fields' mass is within [0.5, 2];
    one more warns and names it."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        within = tsrnn.TILT(**grid, k=largest)
    mass = within.kernels(20000).sum(1)
    assert ((mass >= 0.5) & (mass <= 2)).all()
    with pytest.warns(UserWarning, match=rf"k={largest + 1} on the τ\* grid .* k <= {largest} keeps every mass"):
        tsrnn.TILT(**grid, k=largest + 1)


def impulse_mass(n_taus=30, tau_min=1.0, tau_max=50.0, k=4, g=0.0, dt=1.0, integrate="exact", steps=200):
    """Σ_j g_τ*(j) / τ*^g of each τ*, measured apart from ``laplace``'s closed form: the literal
    reference run on a unit impulse for ``steps`` steps, its outputs summed, plus the rest of the
    response, which the reference gives in one more step from the state F_T / (1 - e^{-sΔ}) (each
    rate's remaining geometric series Σ_{m>=1} e^{-s m Δ} F_T, read out by Post's operator)."""
    growth = (tau_max / tau_min) ** (1 / (n_taus - 1))
    s = k / (tau_min * growth ** torch.arange(-k, n_taus + k, dtype=torch.float64))
    impulse = torch.zeros(steps, 1, 1, dtype=torch.float64)
    impulse[0] = 1
    y, state = reference.tilt(impulse, n_taus, tau_min, tau_max, k, g, dt, integrate)
    rest, _ = reference.tilt(torch.zeros(1, 1, 1, dtype=torch.float64), n_taus, tau_min, tau_max, k, g, dt, integrate,
                             state=state / -torch.expm1(-s * dt)[None, :, None])
    tau = tau_min * growth ** torch.arange(n_taus, dtype=torch.float64)
    return (y[:, 0, :, 0].sum(0) + rest[0, 0, :, 0]) / tau**g


GRIDS = {"default": {}, "coarse": {"n_taus": 8}, "12 τ*": {"n_taus": 12},
         "seed 004 fine": {"n_taus": 25, "tau_max": 1.1 ** 24}}
SETTINGS = {"": {}, "g=1": {"g": 1.0}, "unit": {"integrate": "unit"}, "unit dt=0.1": {"integrate": "unit", "dt": 0.1},
            "dt=0.5": {"dt": 0.5}}


@pytest.mark.parametrize("k", [1, 2, 4, 6, 7, 10, 16])
@pytest.mark.parametrize("grid", GRIDS, ids=str)
@pytest.mark.parametrize("setting", SETTINGS, ids=lambda name: name or "exact")
def test_tilt_warns_exactly_when_a_receptive_field_mass_leaves_half_to_double(k, grid, setting):
    """One rule for every k, grid, g, dt and β: a warning (one) when the mass of any τ*'s receptive
    field, over τ*^g, leaves [0.5, 2], measured here on an impulse through the reference; the
    warning names a τ* outside and its mass."""
    config = {"k": k, **GRIDS[grid], **SETTINGS[setting]}
    mass = impulse_mass(**config)
    outside = ((mass < 0.5) | (mass > 2)).tolist()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tsrnn.TILT(**config)
    assert len(caught) == any(outside), [str(w.message) for w in caught]
    if any(outside):
        message = str(caught[0].message)
        named = re.search(r"(\d+) of the \d+ receptive fields .* \(slot (\d+)\) has ([-+.e\d]+)", message)
        count, slot, value = int(named[1]), int(named[2]), float(named[3])
        assert count == sum(outside) and outside[slot], message
        assert value == pytest.approx(mass[slot].item(), rel=1e-3)


@pytest.mark.parametrize("kwargs, why", [
    ({"k": 60}, r"its receptive fields have mass 2.43e\+60, beyond float32's range .*; k <= 6 keeps every mass "
                r"in \[0.5, 2\] on this grid"),  # float32 outputs were NaN
    ({"tau_max": 1.0 + 1e-9}, r"float64 rounding swamps Post's k-th difference \(the τ\* are too close together\); "
                              r"k <= 1 keeps every mass"),  # outputs were ~4e24
    ({"tau_max": 1.0 + 1e-9, "k": 2}, r"float64 rounding swamps"),
    ({"n_taus": 2, "tau_max": 1000.0, "k": 60}, r"Post's k-th difference is not finite in float64; no k keeps"),
])
def test_unusable_receptive_fields_are_refused(kwargs, why):
    k = kwargs.get("k", 4)
    with pytest.raises(ValueError, match=rf"^tsrnn\.TILT cannot use k={k} on the τ\* grid .*: {why}"):
        tsrnn.TILT(**kwargs)
    tsrnn.TILT(**{**kwargs, "k": 1})  # k = 1 is fine on each of these grids (warned on the coarse one)


def test_input_errors():
    tilt = tsrnn.TILT(n_taus=4)
    u = torch.randn(5, 2, 3)
    bad = u.clone()
    bad[2, 1, 0] = float("nan")
    with pytest.raises(ValueError, match="u must be finite"):
        tilt(bad)
    with pytest.raises(ValueError, match="u must have 3 dimensions"):
        tilt(torch.randn(5, 3))
    with pytest.raises(TypeError, match="u must be a floating-point tensor"):
        tilt(torch.ones(5, 2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"reset must have shape \(5, 2\)"):
        tilt(u, reset=torch.zeros(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"state must have shape \(2, 12, 3\)"):
        tilt(u, state=torch.zeros(2, 38, 3))
    with pytest.raises(ValueError, match="does not support reset"):
        tsrnn.TILT(n_taus=4, method="fft")(u, reset=torch.zeros(5, 2, dtype=torch.bool))


def test_reset_mask_values_and_layout_are_checked():
    u = torch.randn(5, 2, 3)
    with pytest.raises(ValueError, match="reset must hold only 0 and 1"):
        tsrnn.TILT(n_taus=4)(u, reset=torch.full((5, 2), 2.0))
    bf = tsrnn.TILT(n_taus=4, batch_first=True)
    with pytest.raises(ValueError, match=r"reset must have shape \(2, 5\), got \(5, 2\)"):
        bf(u.transpose(0, 1), reset=torch.zeros(5, 2, dtype=torch.bool))
    as_int, _ = tsrnn.TILT(n_taus=4)(u, reset=torch.tensor([[1, 0]] * 5))
    as_bool, _ = tsrnn.TILT(n_taus=4)(u, reset=torch.tensor([[True, False]] * 5))
    assert torch.equal(as_int, as_bool)
