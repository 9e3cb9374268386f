"""Tests for tsrnn.memory.timescales: S2-S6 of docs/equations.md §2, the seed-000 assignment, chrono, the KS fit."""
import math

import numpy as np
import pytest
import scipy.stats
import torch

from tsrnn.memory import timescales as ts

F64 = torch.float64


def _grid(lo, hi, n=2001):
    return torch.logspace(math.log10(lo), math.log10(hi), n, dtype=F64)


# --------------------------------------------------------------------------------------------
# S2-S4

def test_round_trip_timescale_bias_timescale_float64():
    T = _grid(1.01, 1e5)
    back = ts.timescale_from_bias(ts.bias_from_timescale(T))
    assert back.dtype == F64
    rel = ((back - T) / T).abs().max().item()
    assert rel < 1e-12, rel


def test_round_trip_bias_timescale_bias_float64():
    b = torch.linspace(-10.0, 11.5, 2001, dtype=F64)
    back = ts.bias_from_timescale(ts.timescale_from_bias(b))
    assert (back - b).abs().max().item() < 1e-12


def test_s3_matches_literal_formula():
    T = _grid(0.05, 1e5)
    literal = -torch.log(torch.expm1(1.0 / T))
    torch.testing.assert_close(ts.bias_from_timescale(T), literal, rtol=1e-12, atol=1e-13)


def test_s2_matches_literal_formula_and_free_input_decay():
    b = torch.linspace(-10.0, 15.0, 501, dtype=F64)
    T = ts.timescale_from_bias(b)
    literal = -1.0 / torch.log(torch.sigmoid(b))
    torch.testing.assert_close(T, literal, rtol=1e-8, atol=0)
    # free-input regime: c_t = σ(b_f)^t c_0 shrinks by e every T steps (seed 000, eq. 1-2)
    torch.testing.assert_close(torch.sigmoid(b) ** T, torch.full_like(b, math.exp(-1)),
                               rtol=1e-8, atol=0)


def test_known_values():
    # T = 1/log 2 <=> b_f = 0 (σ(0) = 1/2); T = 3 -> b_f = -log(e^{1/3} - 1)
    assert ts.bias_from_timescale(1.0 / math.log(2.0)).item() == pytest.approx(0.0, abs=1e-15)
    assert ts.bias_from_timescale(3.0).item() == pytest.approx(-math.log(math.exp(1 / 3) - 1),
                                                               rel=1e-14)
    assert ts.timescale_from_bias(0.0).item() == pytest.approx(1.0 / math.log(2.0), rel=1e-15)


def test_input_bias_convention_s4():
    # b_i = -b_f gives i = 1 - f at zero input, with f = e^{-1/T}
    T = _grid(1.01, 1e4, 101)
    b_f = ts.bias_from_timescale(T)
    f = torch.sigmoid(b_f)
    i = torch.sigmoid(-b_f)
    torch.testing.assert_close(f, torch.exp(-1.0 / T), rtol=1e-13, atol=0)
    torch.testing.assert_close(i, -torch.expm1(-1.0 / T), rtol=1e-10, atol=0)


def test_extreme_values_do_not_overflow():
    # literal expm1(1/T) overflows for T = 1e-3; the bias is ~ -1/T
    b = ts.bias_from_timescale(torch.tensor([1e-3, 1e-3], dtype=torch.float32))
    assert torch.isfinite(b).all() and b[0].item() == pytest.approx(-1000.0, rel=1e-6)
    T = ts.timescale_from_bias(torch.tensor([-800.0, 700.0, 50.0], dtype=F64))
    assert T[0].item() == pytest.approx(1.0 / 800.0, rel=1e-12)
    assert T[1].item() == pytest.approx(math.exp(700.0), rel=1e-12)
    # float32 at b = 50: e^{-b} is subnormal in float32; T = e^50 must still come out
    T32 = ts.timescale_from_bias(torch.tensor([50.0, 30.0], dtype=torch.float32))
    assert T32.dtype == torch.float32
    torch.testing.assert_close(T32.double(), torch.tensor([math.exp(50.0), math.exp(30.0)], dtype=F64),
                               rtol=1e-6, atol=0)


def test_dtypes_and_input_kinds():
    assert ts.bias_from_timescale(3.0).dtype == F64
    assert ts.bias_from_timescale(3).shape == ()
    out = ts.bias_from_timescale([3.0, 4.0])
    assert out.dtype == F64 and out.shape == (2,)
    assert ts.bias_from_timescale(np.array([3.0, 4.0])).dtype == F64
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        T = torch.tensor([3.0, 40000.0], dtype=dtype)
        b = ts.bias_from_timescale(T)
        assert b.dtype == dtype
        assert ts.timescale_from_bias(b).dtype == dtype
    # float32: the bias of T = 40000 keeps float32 precision (math never in half precision)
    b32 = ts.bias_from_timescale(torch.tensor([40000.0], dtype=torch.float32))
    assert b32.item() == pytest.approx(ts.bias_from_timescale(40000.0).item(), rel=1e-6)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, -math.inf, [3.0, 0.0],
                                 torch.tensor([1.0, float("nan")])])
def test_bias_from_timescale_rejects_bad_values(bad):
    with pytest.raises(ValueError, match="T"):
        ts.bias_from_timescale(bad)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, torch.tensor([0.0, float("inf")])])
def test_timescale_from_bias_rejects_non_finite(bad):
    with pytest.raises(ValueError, match="b"):
        ts.timescale_from_bias(bad)


@pytest.mark.parametrize("fn", [ts.bias_from_timescale, ts.timescale_from_bias])
@pytest.mark.parametrize("bad", ["abc", None, {"a": 1}, [1.0, "x"], True, torch.tensor([3, 4])])
def test_garbage_is_type_error(fn, bad):
    with pytest.raises(TypeError):
        fn(bad)


# --------------------------------------------------------------------------------------------
# Inverse gamma (S5) and the assignment

def test_quantiles_reproduce_spec_numbers():
    T = ts.inverse_gamma_quantiles(1150, 0.56)
    assert T.dtype == F64 and T.shape == (1150,)
    assert bool((T[1:] < T[:-1]).all())                      # strictly descending
    assert bool(torch.isfinite(T).all() and (T > 0).all())
    assert (T < 20).double().mean().item() == pytest.approx(0.794, abs=5e-4)
    assert T.median().item() == pytest.approx(3.57, abs=5e-3)
    assert (T >= 100).double().mean().item() == pytest.approx(0.08, abs=0.01)
    assert 1e5 <= T.max().item() < 1e6


def test_quantiles_are_the_stated_quantiles():
    n, alpha, beta = 37, 1.5, 2.0
    T = ts.inverse_gamma_quantiles(n, alpha, beta).numpy()
    q = np.arange(1, n + 1) / (n + 1)
    np.testing.assert_allclose(scipy.stats.invgamma.cdf(T, alpha, scale=beta), 1 - q, rtol=1e-10)


def test_quantiles_give_power_law_s5():
    # E_T[e^{-t/T}] = (t + 1)^{-α} for T ~ InvGamma(α, 1); quantiles are a quadrature with error
    # below 1/n for this bounded monotone integrand.
    for alpha in (0.56, 1.5):
        T = ts.inverse_gamma_quantiles(100_000, alpha)
        for t in (1.0, 10.0, 100.0, 1000.0):
            mean = torch.exp(-t / T).mean().item()
            assert mean == pytest.approx((t + 1) ** -alpha, abs=2e-5), (alpha, t)


def test_inverse_gamma_seeded_and_follows_the_law():
    draw = lambda seed, n=4000, alpha=0.56, beta=1.0: ts.inverse_gamma(
        n, alpha, beta, generator=torch.Generator().manual_seed(seed))
    a, b, c = draw(0), draw(0), draw(1)
    assert a.dtype == F64 and a.shape == (4000,)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert bool((a > 0).all() and torch.isfinite(a).all())
    assert scipy.stats.kstest(a.numpy(), "invgamma", args=(0.56, 0, 1.0)).pvalue > 1e-3
    d = draw(2, alpha=1.5, beta=3.0)
    assert scipy.stats.kstest(d.numpy(), "invgamma", args=(1.5, 0, 3.0)).pvalue > 1e-3
    # and the test has power: the same draws are rejected under the wrong shape
    assert scipy.stats.kstest(d.numpy(), "invgamma", args=(1.2, 0, 3.0)).pvalue < 1e-3


def test_inverse_gamma_global_generator():
    torch.manual_seed(123)
    a = ts.inverse_gamma(10, 1.0)
    torch.manual_seed(123)
    assert torch.equal(a, ts.inverse_gamma(10, 1.0))


@pytest.mark.parametrize("fn", [ts.inverse_gamma, ts.inverse_gamma_quantiles])
def test_inverse_gamma_argument_errors(fn):
    for n in (0, -3):
        with pytest.raises(ValueError, match="n"):
            fn(n, 1.0)
    for n in (2.0, "3", None, True):
        with pytest.raises(TypeError, match="n"):
            fn(n, 1.0)
    for alpha in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="alpha"):
            fn(5, alpha)
    for beta in (0.0, -2.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="beta"):
            fn(5, 1.0, beta)
    with pytest.raises(TypeError, match="alpha"):
        fn(5, "1.0")


def test_inverse_gamma_rejects_bad_generator():
    with pytest.raises(TypeError, match="generator"):
        ts.inverse_gamma(5, 1.0, generator=0)


def test_lm_timescales_default():
    layers = ts.lm_timescales()
    assert len(layers) == 3
    first, second, third = layers
    assert first.dtype == F64 and first.shape == (1150,)
    assert bool((first[:575] == 3).all() and (first[575:] == 4).all())
    assert torch.equal(second, ts.inverse_gamma_quantiles(1150, 0.56))
    assert third is None


def test_lm_timescales_other_shapes():
    one = ts.lm_timescales((5,))
    assert len(one) == 1 and one[0].tolist() == [3.0, 3.0, 4.0, 4.0, 4.0]
    four = ts.lm_timescales((4, 7, 3, 2), alpha=1.5, beta=2.0)
    assert [x is None for x in four] == [False, False, True, True]
    assert torch.equal(four[1], ts.inverse_gamma_quantiles(7, 1.5, 2.0))
    for bad in ((), (0, 3)):
        with pytest.raises(ValueError, match="layer_sizes"):
            ts.lm_timescales(bad)
    for bad in (5, "abc", (3.5, 2)):
        with pytest.raises(TypeError, match="layer_sizes"):
            ts.lm_timescales(bad)
    with pytest.raises(ValueError, match="alpha"):
        ts.lm_timescales((4, 4), alpha=0.0)


# --------------------------------------------------------------------------------------------
# Chrono

def test_chrono_range_and_law():
    t_max = 30.0
    b = ts.chrono(20_000, t_max, generator=torch.Generator().manual_seed(0))
    assert b.dtype == F64 and b.shape == (20_000,)
    assert b.min().item() >= 0.0 and b.max().item() <= math.log(t_max - 1)
    assert b.min().item() < 0.01 and b.max().item() > math.log(t_max - 1) - 0.01
    # e^{b_f} ~ U[1, t_max - 1]
    u = torch.exp(b).numpy()
    assert scipy.stats.kstest(u, "uniform", args=(1.0, t_max - 2)).pvalue > 1e-3
    # timescales between 1/log 2 and about t_max - 1/2 (S2)
    T = ts.timescale_from_bias(b)
    assert T.min().item() >= 1 / math.log(2) - 1e-9 and T.max().item() <= t_max - 0.5
    again = ts.chrono(20_000, t_max, generator=torch.Generator().manual_seed(0))
    assert torch.equal(b, again)


def test_chrono_errors():
    for t_max in (2.0, 1.5, 0.0, -4.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="t_max"):
            ts.chrono(4, t_max)
    with pytest.raises(TypeError, match="t_max"):
        ts.chrono(4, "10")
    with pytest.raises(ValueError, match="n"):
        ts.chrono(0, 10.0)


# --------------------------------------------------------------------------------------------
# S6: estimation

def test_estimate_recovers_constant_gates():
    T = torch.tensor([1.5, 3.0, 20.0, 400.0, 1e4], dtype=F64)
    f = torch.exp(-1.0 / T)
    gates = f.expand(50, 4, 5).clone()
    est = ts.estimate_timescales(gates)
    assert est.dtype == F64 and est.shape == (5,)
    torch.testing.assert_close(est, T, rtol=1e-10, atol=0)
    torch.testing.assert_close(ts.estimate_timescales(gates[:, 0]), T, rtol=1e-10, atol=0)
    # float32 gates: the estimate is float64, as good as float32 gates allow
    est32 = ts.estimate_timescales(gates.float())
    assert est32.dtype == F64
    torch.testing.assert_close(est32[:4], T[:4], rtol=1e-3, atol=0)


def test_estimate_uses_the_mean_gate_not_the_mean_log():
    # half the steps at f = 0.5, half at f = 0.9: T_est = -1/log(0.7), not from mean log f
    gates = torch.cat([torch.full((10, 3, 2), 0.5, dtype=F64), torch.full((10, 3, 2), 0.9, dtype=F64)])
    torch.testing.assert_close(ts.estimate_timescales(gates),
                               torch.full((2,), -1 / math.log(0.7), dtype=F64), rtol=1e-12, atol=0)


def test_estimate_pools_a_list_over_all_samples():
    # 3 samples at 0.5 (batch 3), 1 sample at 0.9 (batch 1): pooled mean 0.6
    parts = [torch.full((1, 3, 2), 0.5, dtype=F64), torch.full((1, 1, 2), 0.9, dtype=F64)]
    est = ts.estimate_timescales(parts)
    torch.testing.assert_close(est, torch.full((2,), -1 / math.log(0.6), dtype=F64), rtol=1e-12, atol=0)
    assert torch.equal(ts.estimate_timescales(tuple(parts)), est)


def test_estimate_edges():
    gates = torch.tensor([[1.0, 0.0, 0.5], [1.0, 0.0, 0.5]])
    est = ts.estimate_timescales(gates)
    assert est[0].item() == math.inf and est[1].item() == 0.0
    assert est[2].item() == pytest.approx(1 / math.log(2))


@pytest.mark.parametrize("bad", [
    torch.tensor([[0.5, 1.0001]]), torch.tensor([[-1e-6, 0.5]]),
    torch.rand(4), torch.rand(2, 2, 2, 2), torch.empty(0, 3),
    [], [torch.rand(2, 3), torch.rand(2, 4)], [torch.rand(2, 3), torch.tensor([[2.0, 0.5, 0.5]])],
])
def test_estimate_rejects_bad_values(bad):
    with pytest.raises(ValueError, match="forget_gates"):
        ts.estimate_timescales(bad)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_estimate_rejects_non_finite(bad):
    gates = torch.full((3, 2, 4), 0.5)
    gates[1, 0, 2] = bad
    with pytest.raises(ValueError, match="forget_gates.*finite"):
        ts.estimate_timescales(gates)
    with pytest.raises(ValueError, match=r"forget_gates\[1\].*finite"):
        ts.estimate_timescales([torch.full((3, 2, 4), 0.5), gates])


@pytest.mark.parametrize("bad", [np.full((3, 2), 0.5), [[0.5, 0.5]], torch.ones(3, 2, dtype=torch.int64), None])
def test_estimate_rejects_non_tensors(bad):
    with pytest.raises(TypeError, match="forget_gates"):
        ts.estimate_timescales(bad)


# --------------------------------------------------------------------------------------------
# KS fit (seed 000, Figure 1)

def test_fit_recovers_alpha_from_quantiles():
    for alpha in (0.56, 1.5, 3.0):
        fit = ts.fit_inverse_gamma(ts.inverse_gamma_quantiles(2000, alpha))
        assert fit.alpha == pytest.approx(alpha, abs=0.1), (alpha, fit.alpha)
        assert fit.statistic < 0.01


def test_fit_recovers_alpha_from_draws():
    for seed in (0, 1):
        draws = ts.inverse_gamma(2000, 1.5, generator=torch.Generator().manual_seed(seed))
        fit = ts.fit_inverse_gamma(draws)
        assert fit.alpha == pytest.approx(1.5, abs=0.1), (seed, fit.alpha)


def test_fit_statistics_match_scipy_kstest():
    draws = ts.inverse_gamma(300, 0.8, beta=2.0, generator=torch.Generator().manual_seed(3))
    fit = ts.fit_inverse_gamma(draws, alphas=[0.3, 0.8, 2.0], beta=2.0)
    assert fit.alphas.tolist() == [0.3, 0.8, 2.0]
    for a, d in zip(fit.alphas.tolist(), fit.statistics.tolist()):
        ref = scipy.stats.kstest(draws.numpy(), "invgamma", args=(a, 0, 2.0)).statistic
        assert d == pytest.approx(ref, rel=1e-10, abs=1e-12)
    assert fit.alpha == 0.8
    assert fit.statistic == fit.statistics.min().item()


def test_fit_default_grid_and_minimum():
    fit = ts.fit_inverse_gamma(ts.inverse_gamma_quantiles(500, 1.4))
    assert fit.alphas.shape == fit.statistics.shape and fit.alphas.numel() >= 100
    assert fit.alphas.min().item() > 0 and fit.alphas.max().item() >= 5.0
    k = int(torch.argmin(fit.statistics))
    assert fit.alpha == fit.alphas[k].item() and fit.statistic == fit.statistics[k].item()
    assert fit.alpha == pytest.approx(1.4, abs=0.02)


def test_fit_keeps_infinite_timescales():
    # a unit that never forgets (T_est = inf) counts as beyond every finite T, as in scipy's kstest
    x = torch.cat([ts.inverse_gamma_quantiles(200, 1.0), torch.tensor([math.inf] * 20, dtype=F64)])
    fit = ts.fit_inverse_gamma(x, alphas=[0.5, 0.75, 1.0])
    for a, d in zip(fit.alphas.tolist(), fit.statistics.tolist()):
        ref = scipy.stats.kstest(x.numpy(), "invgamma", args=(a, 0, 1.0)).statistic
        assert d == pytest.approx(ref, rel=1e-10)
    # 10% of units at inf pull the fit towards heavier tails than the finite ones alone
    assert fit.alpha == 0.75
    assert ts.fit_inverse_gamma(x[:200], alphas=[0.5, 0.75, 1.0]).alpha == 1.0


def test_fit_accepts_estimate_output():
    T = ts.inverse_gamma_quantiles(1000, 1.5)
    gates = torch.exp(-1.0 / T).expand(3, 2, 1000)
    fit = ts.fit_inverse_gamma(ts.estimate_timescales(gates))
    assert fit.alpha == pytest.approx(1.5, abs=0.1)


@pytest.mark.parametrize("bad", [[1.0, 0.0], [1.0, -2.0], [1.0, math.nan], [1.0, -math.inf],
                                 [math.inf, math.inf], []])
def test_fit_rejects_bad_timescales(bad):
    with pytest.raises(ValueError, match="timescales"):
        ts.fit_inverse_gamma(bad)


def test_fit_rejects_bad_grid_and_beta():
    x = [1.0, 2.0, 3.0]
    for alphas in ([], [0.0, 1.0], [1.0, math.nan], [[1.0, 2.0]]):
        with pytest.raises(ValueError, match="alphas"):
            ts.fit_inverse_gamma(x, alphas=alphas)
    for beta in (0.0, -1.0, math.inf):
        with pytest.raises(ValueError, match="beta"):
            ts.fit_inverse_gamma(x, beta=beta)
    with pytest.raises(TypeError, match="timescales"):
        ts.fit_inverse_gamma("abc")
