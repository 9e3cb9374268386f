"""The fixed numbers of TILT (docs/equations.md §5, seed 004): the rate grid, the finite-difference derivative,
Post's inverse operator and the receptive-field kernels. Everything is built in float64.

    grid   τ*_n = τ_min (1 + c)^n, n = -k .. N+k-1,  c = (τ_max/τ_min)^(1/(N-1)) - 1,  s_n = k / τ*_n
    (S11)  F_t(s) = e^{-sΔ} F_{t-1}(s) + β(s) u_t,   β = (1 - e^{-sΔ}) / s ("exact") or 1 ("unit")
    (S12)  f~_t(τ*_n) = τ*_n^g ((-1)^k / k!) s_n^{k+1} (D^k F_t)_n,   n = 0 .. N-1 (central rates)

Because (S11)-(S12) are linear, f~ = L F_t with L = diag(...) (D^k)[central rows] (N x (N+2k)), and
f~_t = Σ_j g(j) u_{t-j} with the kernel g_τ*(j) = Σ_s L[τ*, s] β(s) e^{-s j Δ}.

With β exact, Σ_j β(s) e^{-s j Δ} = 1/s for any Δ, so a receptive field's mass is Σ_j g_τ*(j) = (L 1/s)_τ*,
which the exact k-th derivative ((-1)^k k! / s^{k+1}) makes τ*^g. The finite difference departs from it
as k grows or the grid coarsens, and on a grid of growth c the mass depends on c and k only.
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


MASS_TOLERANCE = 0.5  # |mass / τ*^g - 1| a receptive field may reach before TILT warns (``check_post``)


def field_mass(L: torch.Tensor, grid_: Grid, n_taus: int, k: int, g: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(mass, rounding), (N,) each, relative to τ*^g: the mass (L 1/s) / τ*^g of each central τ*'s
    receptive field (1 for the exact derivative) and float64's bound on its rounding error,
    eps (|L| 1/s) / τ*^g."""
    inverse, norm = 1 / grid_.s, grid_.tau[k:k + n_taus] ** g
    return L @ inverse / norm, torch.finfo(torch.float64).eps * (L.abs() @ inverse) / norm


def _unusable(mass: torch.Tensor, rounding: torch.Tensor) -> str | None:
    """Why receptive fields of this mass cannot be used at all, or None."""
    if not (torch.isfinite(mass).all() and torch.isfinite(rounding).all()):
        return "Post's k-th difference is not finite in float64"
    if (rounding > MASS_TOLERANCE * mass.abs()).any():
        return "float64 rounding swamps Post's k-th difference (the τ* are too close together)"
    if (mass.abs() > torch.finfo(torch.float32).max).any():
        return (f"its receptive fields have mass {mass.abs().max().item():.3g}, beyond float32's range "
                "(float32 or lower-precision inputs would give inf or NaN)")
    return None


def _stable(mass: torch.Tensor, rounding: torch.Tensor) -> bool:
    return _unusable(mass, rounding) is None and bool(((mass - 1).abs() <= MASS_TOLERANCE).all())


def largest_stable_k(c: float, below: int) -> int:
    """The largest k < ``below`` such that every order 1..k gives receptive fields of mass within
    MASS_TOLERANCE of τ*^g on a grid of growth c (computed on two τ*: the mass depends on c and k
    only); 0 if k = 1 does not."""
    for order in range(1, below):
        small = grid(2, 1.0, 1.0 + c, order)
        if not _stable(*field_mass(post_operator(2, order, 0.0, small), small, 2, order, 0.0)):
            return order - 1
    return below - 1


def check_post(L: torch.Tensor, grid_: Grid, n_taus: int, tau_min: float, tau_max: float, k: int, g: float) -> None:
    """TILT's receptive fields, once at construction: a ValueError where they cannot be used at all
    (not finite, float64 rounding noise, or a mass beyond float32's range), a UserWarning where their
    mass departs from τ*^g by more than MASS_TOLERANCE; both name the largest stable k of the grid."""
    mass, rounding = field_mass(L, grid_, n_taus, k, g)
    if _stable(mass, rounding):
        return
    best = largest_stable_k(grid_.c, k)
    where = (f"the τ* grid n_taus={n_taus}, tau_min={tau_min!r}, tau_max={tau_max!r} "
             f"(growth c={grid_.c:.3g} per τ*)")
    advice = (f"the largest stable k for this grid is {best}" if best else "no k is stable on this grid") + \
        f" (receptive-field mass within {MASS_TOLERANCE:.0%} of 1)"
    unusable = _unusable(mass, rounding)
    if unusable is not None:
        raise ValueError(f"tsrnn.TILT cannot use k={k} on {where}: {unusable}; {advice}")
    unit = "" if g == 0 else " τ*^g"
    worst = mass[(mass - 1).abs().argmax()].item()
    warnings.warn(f"tsrnn.TILT: k={k} is too large for {where}: its receptive fields have mass {worst:.4g}{unit} "
                  f"instead of 1{unit}; {advice}, or use a finer grid (more n_taus)", stacklevel=3)
