"""Unit timescales of LSTM forget gates (docs/equations.md §2, seeds 000 and 003).

A unit whose forget gate sits at its bias b_f forgets with timescale T (S2); a wanted timescale
gives the bias (S3), and the input bias is its negative (S4). Timescales drawn from an
Inverse-Gamma law of shape α add up to a power-law memory (S5). From a trained model, the mean
forget gate gives each unit's timescale (S6), and a grid search on the Kolmogorov-Smirnov
statistic fits α to them, or the mean μ of a narrow Gaussian (seed 000, Figure 1).

    (S2) T = -1 / log σ(b_f) = 1 / log(1 + e^{-b_f})
    (S3) b_f(T) = -log(e^{1/T} - 1)
    (S4) b_i = -b_f
    (S5) E_T[e^{-t/T}] = (t + 1)^{-α}        for T ~ InvGamma(α, β = 1)
    (S6) T_est = -1 / log(mean_{t,b} f_t)

Results are float64 on the CPU unless a tensor comes in, whose dtype and device are kept.
"""
from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np
import torch

from tsrnn import _validation as check

__all__ = [
    "bias_from_timescale",
    "timescale_from_bias",
    "inverse_gamma",
    "inverse_gamma_quantiles",
    "lm_timescales",
    "chrono",
    "estimate_timescales",
    "fit_inverse_gamma",
    "InverseGammaFit",
    "fit_narrow_gaussian",
    "GaussianFit",
]


# Private argument checks; the shared ones are in _validation.

def _float_tensor(name: str, value) -> torch.Tensor:
    """A floating tensor as given, or float64 from a number, sequence or numpy array."""
    if isinstance(value, torch.Tensor):
        return check.tensor(name, value)
    if isinstance(value, (bool, str, bytes)):
        raise TypeError(f"{name} must be a number, a sequence of numbers or a floating tensor, "
                        f"got {type(value).__name__}")
    try:
        return torch.as_tensor(value, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError) as err:
        raise TypeError(f"{name} must be a number, a sequence of numbers or a floating tensor, "
                        f"got {type(value).__name__} ({err})") from None


def _generator(generator) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")


def _uniform(n: int, generator: torch.Generator | None) -> torch.Tensor:
    """n float64 draws from U[0, 1) on the CPU, from ``generator`` (or the global one)."""
    device = generator.device if generator is not None else torch.device("cpu")
    return torch.rand(n, generator=generator, dtype=torch.float64, device=device).cpu()


# S2-S4: bias <-> timescale

def bias_from_timescale(T: torch.Tensor | float | Sequence[float]) -> torch.Tensor:
    """Forget-gate bias with timescale T (S3): b_f = -log(expm1(1/T)), free of overflow for small T.

    T: number, sequence or floating tensor, every value finite and > 0. Returns float64 for
    non-tensor input, otherwise a tensor of T's dtype and device (math in float32 or higher).
    """
    T = _float_tensor("T", T)
    check.positive("T", T)
    x = 1.0 / T.to(torch.promote_types(T.dtype, torch.float32))
    return (-x - torch.log(-torch.expm1(-x))).to(T.dtype)


def timescale_from_bias(b: torch.Tensor | float | Sequence[float]) -> torch.Tensor:
    """Timescale of a forget-gate bias (S2): T = -1/log σ(b) = 1/log(1 + e^{-b}).

    No overflow for any finite b; a T beyond the dtype's range gives inf. b: number, sequence or floating tensor, every value finite. Returns float64 for non-tensor
    input, otherwise a tensor of b's dtype and device (math in float32 or higher).
    """
    b = _float_tensor("b", b)
    check.finite("b", b)
    z = -b.to(torch.promote_types(b.dtype, torch.float32))
    softplus = z.clamp_min(0) + torch.log1p(torch.exp(-z.abs()))
    return (1.0 / softplus).to(b.dtype)


# The Inverse-Gamma law (S5) and the seed-000 assignment

def inverse_gamma(n: int, alpha: float, beta: float = 1.0,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """n random timescales T ~ InvGamma(α, scale β), pdf β^α/Γ(α) T^{-α-1} e^{-β/T} (S5).

    Inverse-CDF sampling from u ~ U[0, 1) drawn with ``generator`` (the global one if None): a
    seeded generator gives the same timescales on every machine; every T > 0.
    Returns a float64 CPU tensor of shape (n,).
    """
    n = check.count("n", n)
    alpha = check.positive_real("alpha", alpha)
    beta = check.positive_real("beta", beta)
    _generator(generator)
    u = _uniform(n, generator).clamp_min(torch.finfo(torch.float64).tiny).numpy()
    import scipy.stats  # here, not at import time (slow to load)

    return torch.from_numpy(scipy.stats.invgamma.ppf(u, alpha, scale=beta))


def inverse_gamma_quantiles(n: int, alpha: float, beta: float = 1.0) -> torch.Tensor:
    """n deterministic timescales T_j = F^{-1}(1 - q_j), q_j = j/(n + 1), j = 1..n (docs/equations.md §2).

    F is the InvGamma(α, scale β) CDF (taken as the inverse survival function, exact in the
    tail). Descending, all finite and > 0. Returns a float64 CPU tensor of shape (n,).
    """
    n = check.count("n", n)
    alpha = check.positive_real("alpha", alpha)
    beta = check.positive_real("beta", beta)
    q = np.arange(1, n + 1, dtype=np.float64) / (n + 1)
    import scipy.stats  # here, not at import time (slow to load)

    return torch.from_numpy(scipy.stats.invgamma.isf(q, alpha, scale=beta))


def lm_timescales(layer_sizes: Sequence[int] = (1150, 1150, 400), alpha: float = 0.56,
                  beta: float = 1.0) -> list:
    """The timescales of the seed-000 multi-timescale LM, one entry per layer (docs/equations.md §2).

    Layer 1: T = 3 for the first n//2 units and T = 4 for the rest; layer 2:
    ``inverse_gamma_quantiles(n, alpha, beta)``; layers 3 and up: None (learned biases).
    Pass the list as ``tsrnn.LSTM(..., timescales=...)``. Tensors are float64 on the CPU.
    """
    if isinstance(layer_sizes, (str, bytes)) or not isinstance(layer_sizes, Sequence):
        raise TypeError(f"layer_sizes must be a sequence of ints, got {type(layer_sizes).__name__}")
    if len(layer_sizes) == 0:
        raise ValueError("layer_sizes must name at least one layer, got an empty sequence")
    sizes = [check.count(f"layer_sizes[{k}]", size) for k, size in enumerate(layer_sizes)]
    alpha = check.positive_real("alpha", alpha)
    beta = check.positive_real("beta", beta)
    first = torch.full((sizes[0],), 4.0, dtype=torch.float64)
    first[: sizes[0] // 2] = 3.0
    out: list = [first]
    if len(sizes) > 1:
        out.append(inverse_gamma_quantiles(sizes[1], alpha, beta))
    out.extend(None for _ in sizes[2:])
    return out


def chrono(n: int, t_max: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """Chrono initialization (Tallec & Ollivier 2018, cited in seed 002): b_f = log(U[1, t_max - 1]).

    Returns the n forget-gate biases (input-gate biases: -b_f, S4), float64 CPU (n,), drawn with
    ``generator`` (the global one if None). t_max must be finite and > 2.
    """
    n = check.count("n", n)
    t_max = check.real("t_max", t_max)
    if not math.isfinite(t_max) or t_max <= 2:
        raise ValueError(f"t_max must be finite and > 2 (U[1, t_max - 1] must not be empty), "
                         f"got {t_max:g}")
    _generator(generator)
    return torch.log(1.0 + (t_max - 2.0) * _uniform(n, generator))


# S6: timescales of a trained model, and the Inverse-Gamma fit

def estimate_timescales(forget_gates: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
    """Per-unit timescale from forget-gate activations (S6): T_est = -1/log(mean_{t,b} f).

    forget_gates: a floating tensor (T, B, H) or (T, H), or a list/tuple of them (batch sizes may
    differ), pooled over every t and b; values finite and in [0, 1]. Mean 1 gives inf, 0 gives 0.
    Returns a float64 tensor (H,) on the input's device.
    """
    if isinstance(forget_gates, (list, tuple)):
        if len(forget_gates) == 0:
            raise ValueError("forget_gates must hold at least one tensor, got an empty list")
        parts = [(f"forget_gates[{k}]", g) for k, g in enumerate(forget_gates)]
    else:
        parts = [("forget_gates", forget_gates)]
    total = None
    count = 0
    first_name, first = parts[0]
    for name, gates in parts:
        check.tensor(name, gates, ndims=(2, 3))
        check.same_device(first_name, first, **{name: gates})
        if gates.shape[-1] != first.shape[-1]:
            raise ValueError(f"{name} has {gates.shape[-1]} units (last dimension) but "
                             f"{first_name} has {first.shape[-1]}")
        check.finite(name, gates)
        if gates.numel() and not bool(((gates >= 0) & (gates <= 1)).all()):
            raise ValueError(f"{name} must lie in [0, 1] (forget-gate activations), got values in "
                             f"[{gates.min().item():g}, {gates.max().item():g}]")
        flat = gates.reshape(-1, gates.shape[-1]).to(torch.float64)
        total = flat.sum(0) if total is None else total + flat.sum(0)
        count += flat.shape[0]
    if count == 0:
        raise ValueError("forget_gates must hold at least one time step, got none")
    assert total is not None  # count > 0
    mean = total / count
    return torch.where(mean >= 1, torch.full_like(mean, math.inf), -1.0 / torch.log(mean))


def _checked_timescales(timescales) -> torch.Tensor:
    """Flattened float64 CPU timescales for a fit: > 0, no NaN, at least one finite (+inf kept)."""
    T = _float_tensor("timescales", timescales).detach().to("cpu", torch.float64).reshape(-1)
    if T.numel() == 0:
        raise ValueError("timescales must hold at least one value, got none")
    if bool(torch.isnan(T).any()):
        raise ValueError("timescales must not contain NaN")
    if not bool((T > 0).all()):
        raise ValueError(f"timescales must be > 0, got minimum {T.min().item():g}")
    if not bool(torch.isfinite(T).any()):
        raise ValueError("timescales must hold at least one finite value, got only inf")
    return T


def _grid(name: str, values, default: np.ndarray) -> torch.Tensor:
    """A parameter grid: 1-D, non-empty, finite and > 0 (``default`` if None)."""
    if values is None:
        return torch.from_numpy(default)
    grid = _float_tensor(name, values).detach().to("cpu", torch.float64)
    if grid.dim() != 1 or grid.numel() == 0:
        raise ValueError(f"{name} must be a non-empty 1-D grid, got shape {tuple(grid.shape)}")
    check.positive(name, grid)
    return grid


def _ks_statistics(T: torch.Tensor, params: np.ndarray, cdf) -> np.ndarray:
    """Two-sided KS statistic D = sup_T |F_n(T) - F(T)| for every value of ``params``, F being
    ``cdf(params[:, None], T[None, :])`` (+inf allowed: F(inf) = 1)."""
    x = np.sort(T.numpy())
    n = x.size
    above = np.arange(1, n + 1) / n                # F_n just after each sorted T
    below = np.arange(0, n) / n                    # F_n just before it
    stats = np.empty_like(params)
    chunk = max(1, 4_000_000 // n)                 # bound the (chunk, n) CDF table to ~32 MB
    for start in range(0, params.size, chunk):
        F = cdf(params[start:start + chunk, None], x[None, :])
        stats[start:start + chunk] = np.maximum((above - F).max(1), (F - below).max(1))
    return stats


class InverseGammaFit(NamedTuple):
    """Result of ``fit_inverse_gamma``: the best shape, its KS statistic, and the whole curve."""
    alpha: float               # grid value with the smallest KS statistic
    statistic: float           # that KS statistic
    alphas: torch.Tensor       # (K,) float64, the grid searched
    statistics: torch.Tensor   # (K,) float64, KS statistic at each grid value


def _default_grid() -> np.ndarray:
    return np.arange(1, 501, dtype=np.float64) / 100.0   # 0.01, 0.02, ..., 5.00


def fit_inverse_gamma(timescales: torch.Tensor | Sequence[float], alphas: torch.Tensor | Sequence[float] | None = None,
                      beta: float = 1.0) -> InverseGammaFit:
    """Fit the Inverse-Gamma shape α to timescales by the Kolmogorov-Smirnov statistic (seed 000, Fig. 1).

    D(α) = sup_T |F_n(T) - F_α(T)| (scipy.stats.kstest's two-sided statistic), F_α the
    InvGamma(α, scale β) CDF Q(α, β/T); the fit is the α of smallest D (the first on ties).
    timescales: number, sequence or floating tensor of any shape (flattened), every value > 0;
    +inf (a unit that never forgets) is kept, with F_α(inf) = 1. At least one value must be
    finite; NaN, -inf and T <= 0 raise ValueError. alphas: the grid (1-D, finite, > 0); default
    0.01, 0.02, ..., 5.00. beta: the scale, fixed (β = 1 in S5).
    """
    T = _checked_timescales(timescales)
    beta = check.positive_real("beta", beta)
    grid = _grid("alphas", alphas, _default_grid())
    import scipy.special  # here, not at import time (slow to load)

    a = grid.numpy()
    stats = _ks_statistics(T, a, lambda alpha, t: scipy.special.gammaincc(alpha, beta / t))
    best = int(np.argmin(stats))
    return InverseGammaFit(alpha=float(a[best]), statistic=float(stats[best]),
                           alphas=grid.clone(), statistics=torch.from_numpy(stats))


class GaussianFit(NamedTuple):
    """Result of ``fit_narrow_gaussian``: the best mean, its KS statistic, and the whole curve."""
    mu: float                  # grid value with the smallest KS statistic
    statistic: float           # that KS statistic
    sigma: float               # the fixed width
    mus: torch.Tensor          # (K,) float64, the grid searched
    statistics: torch.Tensor   # (K,) float64, KS statistic at each grid value


def fit_narrow_gaussian(timescales: torch.Tensor | Sequence[float], mus: torch.Tensor | Sequence[float] | None = None,
                        sigma: float = 0.1) -> GaussianFit:
    """Fit a narrow Gaussian N(μ, σ²) of fixed width σ to timescales by the KS statistic (seed 000, Fig. 1).

    Seed 000's stand-in for a delta function (every unit at one timescale, §3.2.1).
    D(μ) = sup_T |F_n(T) - Φ((T - μ)/σ)| on the grid; the fit is the μ of smallest D.
    timescales: as ``fit_inverse_gamma`` (+inf kept, Φ(inf) = 1). mus: the grid (1-D, finite,
    > 0); default 0.01, 0.02, ..., 5.00. sigma: finite, > 0.
    """
    T = _checked_timescales(timescales)
    sigma = check.positive_real("sigma", sigma)
    grid = _grid("mus", mus, _default_grid())
    import scipy.special  # here, not at import time (slow to load)

    m = grid.numpy()
    stats = _ks_statistics(T, m, lambda mu, t: scipy.special.ndtr((t - mu) / sigma))
    best = int(np.argmin(stats))
    return GaussianFit(mu=float(m[best]), statistic=float(stats[best]), sigma=sigma, mus=grid.clone(),
                       statistics=torch.from_numpy(stats))
