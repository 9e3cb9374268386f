"""The fixed numbers of TILT (docs/equations.md §5, seed 004): the rate grid, the finite-difference derivative,
Post's inverse operator and the receptive-field kernels. Everything is built in float64.

    grid   τ*_n = τ_min (1 + c)^n, n = -k .. N+k-1,  c = (τ_max/τ_min)^(1/(N-1)) - 1,  s_n = k / τ*_n
    (S11)  F_t(s) = e^{-sΔ} F_{t-1}(s) + β(s) u_t,   β = (1 - e^{-sΔ}) / s ("exact") or 1 ("unit")
    (S12)  f~_t(τ*_n) = τ*_n^g ((-1)^k / k!) s_n^{k+1} (D^k F_t)_n,   n = 0 .. N-1 (central rates)

Because (S11)-(S12) are linear, f~ = L F_t with L = diag(...) (D^k)[central rows] (N x (N+2k)), and
f~_t = Σ_j g(j) u_{t-j} with the kernel g_τ*(j) = Σ_s L[τ*, s] β(s) e^{-s j Δ}.
"""
from __future__ import annotations

import math
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
    """D (R x R): three-point d/ds on the non-uniform grid s; first and last rows zero (S12)."""
    R = s.shape[0]
    D = torch.zeros(R, R, dtype=torch.float64)
    for i in range(1, R - 1):
        h1, h2 = (s[i] - s[i - 1]).item(), (s[i + 1] - s[i]).item()
        H = h1 + h2
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
