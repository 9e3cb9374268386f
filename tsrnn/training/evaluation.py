"""Perplexity with confidence intervals, overall and by training frequency (seed 000, Table 1).

Per-token negative log-likelihoods of the test set are grouped into blocks of 100 consecutive
tokens; a percentile bootstrap over blocks (10,000 resamples) gives 95% intervals that respect
the correlation between neighbouring tokens. Two models scored on the same tokens give a paired
interval for the difference of their perplexities.
"""
from __future__ import annotations

import math

import torch

# training-frequency bins of the target word (seed 000, Table 1): label -> [low, high)
BINS = {">10K": (10_001, math.inf), "1K-10K": (1_001, 10_001), "100-1K": (100, 1_001), "<100": (0, 100)}


def _block_sums(nll: torch.Tensor, groups: torch.Tensor, n_groups: int, block: int):
    """(blocks, groups) sums of nll and token counts per block of ``block`` tokens."""
    n_blocks = max(1, nll.numel() // block)
    used = n_blocks * block
    nll, groups = nll[:used].double().view(n_blocks, block), groups[:used].view(n_blocks, block)
    one_hot = torch.nn.functional.one_hot(groups, n_groups).double()  # (blocks, block, groups)
    return torch.einsum("bk,bkg->bg", nll, one_hot), one_hot.sum(1)


def bin_of_targets(targets: torch.Tensor, train_counts: torch.Tensor) -> torch.Tensor:
    """Index into BINS (0 .. 3) of each target's training frequency."""
    freq = train_counts[targets]
    out = torch.empty_like(targets)
    for i, (low, high) in enumerate(BINS.values()):
        out[(freq >= low) & (freq < high)] = i
    return out


def perplexity_table(nll, targets, train_counts, baseline_nll=None, block=100, resamples=10_000,
                     seed=0) -> list[dict]:
    """Rows {"bin", "tokens", "ppl", "low", "high"[, "baseline_ppl", "diff", "diff_low",
    "diff_high"]} for "all" and each frequency bin; diff = baseline - model perplexity."""
    groups = bin_of_targets(targets, train_counts)
    names = ["all", *BINS]
    g = torch.Generator().manual_seed(seed)
    sums, counts = _block_sums(nll, groups, len(BINS), block)
    sums = torch.cat([sums.sum(1, keepdim=True), sums], 1)  # column 0: all tokens
    counts = torch.cat([counts.sum(1, keepdim=True), counts], 1)
    pick = torch.randint(sums.shape[0], (resamples, sums.shape[0]), generator=g)
    boot = torch.exp(sums[pick].sum(1) / counts[pick].sum(1))  # (resamples, 5)
    ppl = torch.exp(sums.sum(0) / counts.sum(0))
    rows = []
    for i, name in enumerate(names):
        low, high = torch.nanquantile(boot[:, i], torch.tensor([0.025, 0.975], dtype=torch.float64))
        rows.append({"bin": name, "tokens": int(counts[:, i].sum()), "ppl": ppl[i].item(),
                     "low": low.item(), "high": high.item()})
    if baseline_nll is not None:
        base_sums, _ = _block_sums(baseline_nll, groups, len(BINS), block)
        base_sums = torch.cat([base_sums.sum(1, keepdim=True), base_sums], 1)
        base_ppl = torch.exp(base_sums.sum(0) / counts.sum(0))
        diff_boot = torch.exp(base_sums[pick].sum(1) / counts[pick].sum(1)) - boot
        for i, row in enumerate(rows):
            low, high = torch.nanquantile(diff_boot[:, i], torch.tensor([0.025, 0.975], dtype=torch.float64))
            row.update(baseline_ppl=base_ppl[i].item(), diff=(base_ppl[i] - ppl[i]).item(),
                       diff_low=low.item(), diff_high=high.item())
    return rows


def _interval(low: float, high: float) -> str:
    return f"[{low:.2f}, {high:.2f}]"


def format_table(rows: list[dict]) -> str:
    paired = "diff" in rows[0]
    head = f"{'bin':<8}{'tokens':>9}{'ppl':>10}{'95% CI':>22}"
    if paired:
        head += f"{'baseline':>10}{'base - model':>14}{'95% CI':>22}"
    lines = [head, "-" * len(head)]
    for r in rows:
        line = f"{r['bin']:<8}{r['tokens']:>9}{r['ppl']:>10.2f}{_interval(r['low'], r['high']):>22}"
        if paired:
            line += f"{r['baseline_ppl']:>10.2f}{r['diff']:>14.2f}{_interval(r['diff_low'], r['diff_high']):>22}"
        lines.append(line)
    return "\n".join(lines)
