"""The fixed numbers of TILT (docs/equations.md §5, seed 004): the rate grid, the finite-difference derivative,
Post's inverse operator and the receptive-field kernels. Everything is built in float64.

    grid   τ*_n = τ_min (1 + c)^n, n = -k .. N+k-1,  c = (τ_max/τ_min)^(1/(N-1)) - 1,  s_n = k / τ*_n
    (S11)  F_t(s) = e^{-sΔ} F_{t-1}(s) + β(s) u_t,   β = (1 - e^{-sΔ}) / s ("exact") or 1 ("unit")
    (S12)  f~_t(τ*_n) = τ*_n^g ((-1)^k / k!) s_n^{k+1} (D^k F_t)_n,   n = 0 .. N-1 (central rates)

Because (S11)-(S12) are linear, f~ = L F_t with L = diag(...) (D^k)[central rows] (N x (N+2k)), and
f~_t = Σ_j g(j) u_{t-j} with the kernel g_τ*(j) = Σ_s L[τ*, s] β(s) e^{-s j Δ}.

With β exact, Σ_j β(s) e^{-s j Δ} = 1/s for any Δ, so a receptive field's mass is Σ_j g_τ*(j) = (L 1/s)_τ*,
which the exact k-th derivative ((-1)^k k! / s^{k+1}) makes τ*^g. The finite difference departs from it
as k grows or the grid coarsens, and on a grid of growth c the mass depends on c and k only. In general
(β unit too) the mass is (L β / (1 - e^{-sΔ}))_τ*, each rate's geometric series. TILT has one rule on it
(``check_post``): a mass relative to τ*^g outside [0.5, 2] at any τ* warns; one that is not finite,
swamped by rounding or beyond float32's range is refused.
"""
from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import torch

from tsrnn import _validation as check

INTEGRATE = ("exact", "unit")


class Grid(NamedTuple):
    tau: torch.Tensor  # (N+2k,) τ* over the full grid, increasing
    s: torch.Tensor  # (N+2k,) rates k / τ*, decreasing
    c: float  # grid growth: τ*_{n+1} = (1 + c) τ*_n


def validate(n_taus, tau_min, tau_max, k, g, dt, integrate) -> None:
    """The parameter checks of docs/equations.md §8 for TILT."""
    check.count("n_taus", n_taus, minimum=2)
    tau_min = check.positive_real("tau_min", tau_min)
    tau_max = check.positive_real("tau_max", tau_max)
    if not tau_min < tau_max:
        raise ValueError(f"tau_min must be < tau_max, got tau_min={tau_min}, tau_max={tau_max}")
    check.count("k", k, minimum=1)
    check.finite("g", torch.tensor(check.real("g", g)))
    check.positive_real("dt", dt)
    check.choice("integrate", integrate, INTEGRATE)


def grid(n_taus: int, tau_min: float, tau_max: float, k: int) -> Grid:
    """The N + 2k values of τ* (k extra at each end) and their rates s = k / τ*."""
    c = (tau_max / tau_min) ** (1.0 / (n_taus - 1)) - 1.0
    n = torch.arange(-k, n_taus + k, dtype=torch.float64)
    tau = tau_min * (1.0 + c) ** n
    return Grid(tau, k / tau, c)


def derivative_matrix(s: torch.Tensor) -> torch.Tensor:
    """D (R x R): three-point d/ds on the non-uniform grid s; first and last rows zero (S12).
    Points that coincide in float64 give non-finite rows (``check_post`` refuses them)."""
    R = s.shape[0]
    D = torch.zeros(R, R, dtype=torch.float64)
    h1, h2 = s[1:-1] - s[:-2], s[2:] - s[1:-1]
    H = h1 + h2
    i = torch.arange(1, R - 1)
    D[i, i - 1] = -h2 / (h1 * H)
    D[i, i] = h2 / (h1 * H) - h1 / (h2 * H)
    D[i, i + 1] = h1 / (h2 * H)
    return D


def decay_and_input_weight(s: torch.Tensor, dt: float, integrate: str) -> tuple[torch.Tensor, torch.Tensor]:
    """e^{-sΔ} and β(s) of (S11)."""
    decay = torch.exp(-s * dt)
    beta = -torch.expm1(-s * dt) / s if integrate == "exact" else torch.ones_like(s)
    return decay, beta


def post_operator(n_taus: int, k: int, g: float, grid_: Grid) -> torch.Tensor:
    """L (N x (N+2k)): f~ = L F for the central τ* (S12), in float64."""
    Dk = torch.linalg.matrix_power(derivative_matrix(grid_.s), k)
    central = slice(k, k + n_taus)
    s, tau = grid_.s[central], grid_.tau[central]
    scale = tau**g * (-1) ** k / float(math.factorial(k)) * s ** (k + 1)
    return scale[:, None] * Dk[central]


def kernels(L: torch.Tensor, s: torch.Tensor, beta: torch.Tensor, dt: float, length: int) -> torch.Tensor:
    """g_τ*(j) = Σ_s L[τ*, s] β(s) e^{-s j Δ} for j = 0 .. length-1: (N, length), float64."""
    j = torch.arange(length, dtype=torch.float64)
    return L @ (beta[:, None] * torch.exp(-s[:, None] * j[None, :] * dt))


MASS_RANGE = (0.5, 2.0)  # the receptive-field mass Σ_j g(j) / τ*^g that TILT takes without a warning (``check_post``)
ROUNDING_LIMIT = 0.5  # float64's rounding bound on a mass, as a fraction of it, beyond which TILT refuses


def field_mass(L: torch.Tensor, grid_: Grid, n_taus: int, k: int, g: float, dt: float,
               integrate: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(mass, rounding), (N,) each, relative to τ*^g: the mass Σ_j g_τ*(j) / τ*^g of each central
    τ*'s receptive field, the sum over every lag j >= 0 of its impulse response (the geometric
    series of each rate, L (β / (1 - e^{-sΔ})); L (1/s) with β exact, which Post's exact
    derivative makes τ*^g), and float64's bound on its rounding error, eps (|L| β / (1 - e^{-sΔ})) / τ*^g."""
    _, beta = decay_and_input_weight(grid_.s, dt, integrate)
    total = beta / -torch.expm1(-grid_.s * dt)  # Σ_j β e^{-s j Δ} of each rate
    norm = grid_.tau[k:k + n_taus] ** g
    return L @ total / norm, torch.finfo(torch.float64).eps * (L.abs() @ total) / norm


def _unusable(mass: torch.Tensor, rounding: torch.Tensor) -> str | None:
    """Why receptive fields of this mass cannot be used at all, or None."""
    if not (torch.isfinite(mass).all() and torch.isfinite(rounding).all()):
        return "Post's k-th difference is not finite in float64"
    if (rounding > ROUNDING_LIMIT * mass.abs()).any():
        return "float64 rounding swamps Post's k-th difference (the τ* are too close together)"
    if (mass.abs() > torch.finfo(torch.float32).max).any():
        return (f"its receptive fields have mass {mass.abs().max().item():.3g}, beyond float32's range "
                "(float32 or lower-precision inputs would give inf or NaN)")
    return None


def _outside(mass: torch.Tensor) -> torch.Tensor:
    """How far each mass lies outside MASS_RANGE, as a log ratio (0 inside, inf if not positive)."""
    low, high = MASS_RANGE
    ratio = torch.where(mass > 0, torch.maximum(low / mass, mass / high), torch.full_like(mass, math.inf))
    return ratio.clamp(min=1.0).log()


def _usable_in_range(n_taus, tau_min, tau_max, k, g, dt, integrate) -> bool:
    grid_ = grid(n_taus, tau_min, tau_max, k)
    mass, rounding = field_mass(post_operator(n_taus, k, g, grid_), grid_, n_taus, k, g, dt, integrate)
    return _unusable(mass, rounding) is None and not bool(_outside(mass).any())


def largest_k_in_range(n_taus: int, tau_min: float, tau_max: float, below: int, g: float, dt: float,
                       integrate: str) -> int:
    """The largest k < ``below`` such that every order 1..k gives receptive fields of mass within
    MASS_RANGE on this grid; 0 if k = 1 does not."""
    for order in range(1, below):
        if not _usable_in_range(n_taus, tau_min, tau_max, order, g, dt, integrate):
            return order - 1
    return below - 1


def check_post(L: torch.Tensor, grid_: Grid, n_taus: int, tau_min: float, tau_max: float, k: int, g: float,
               dt: float, integrate: str) -> None:
    """TILT's one rule on its receptive fields, once at construction: a ValueError where they cannot
    be used at all (a mass not finite, swamped by float64 rounding, or beyond float32's range), a
    UserWarning where any τ*'s mass Σ_j g(j) / τ*^g leaves MASS_RANGE, naming the τ* furthest out,
    its mass, and what brings it back: the largest k for the grid, a finer grid (β exact), or the
    exact β (β unit)."""
    mass, rounding = field_mass(L, grid_, n_taus, k, g, dt, integrate)
    unusable = _unusable(mass, rounding)
    outside = _outside(mass)
    if unusable is None and not bool(outside.any()):
        return
    best = largest_k_in_range(n_taus, tau_min, tau_max, k, g, dt, integrate)
    where = (f"the τ* grid n_taus={n_taus}, tau_min={tau_min!r}, tau_max={tau_max!r} "
             f"(growth c={grid_.c:.3g} per τ*)")
    low, high = MASS_RANGE
    advice = (f"k <= {best} keeps every mass in [{low:g}, {high:g}] on this grid" if best else
              f"no k keeps every mass in [{low:g}, {high:g}] on this grid")
    if integrate == "exact":  # the k-th difference tends to the derivative: the mass to τ*^g as the growth c falls
        advice += "; a finer grid (more n_taus over the same range) brings it closer to 1 at any k"
    elif _usable_in_range(n_taus, tau_min, tau_max, k, g, dt, "exact"):
        advice += f"; integrate='exact' (β = (1 - e^(-sΔ)) / s) keeps every mass in [{low:g}, {high:g}] at this k"
    if unusable is not None:
        raise ValueError(f"tsrnn.TILT cannot use k={k} on {where}: {unusable}; {advice}")
    unit = "" if g == 0 else " τ*^g"
    # The first τ* furthest out (on a grid of constant growth with β exact every τ* has the same mass
    # up to rounding, so the first of them)
    worst = int((outside >= outside.max() * (1 - 1e-9)).nonzero()[0])
    count = int((outside > 0).sum())
    warnings.warn(f"tsrnn.TILT: k={k} on {where}: {count} of the {n_taus} receptive fields have a mass Σ_j g(j) "
                  f"outside [{low:g}, {high:g}]{unit}; τ*={grid_.tau[k + worst].item():.4g} (slot {worst}) has "
                  f"{mass[worst].item():.4g}{unit}; {advice}", stacklevel=3)
