"""Test perplexity overall and by word frequency, with bootstrap intervals, as seed 000 computes it.

Seed 000 (Mahto et al., Table 1) scores a test set as its authors' evaluation script
(HuthLab/multi-timescale-LSTM-LMs, ``model_evaluation.py``) does, and so does this module:

- **Targets**: every token of the split but the first, read as one stream (batch size 1, the
  recurrent state carried from window to window).
- **Frequency bins** of a target word by how often it occurs in *all* the corpus's splits
  (train + valid + test: the authors' Dictionary counts every file it reads): >=10K, [1K, 10K),
  [100, 1K), <100. ``word_counts(corpus, "train")`` counts the training split only.
- **Point perplexities**: exp of the mean negative log-likelihood over every target (of a bin).
- **Bootstrap**: blocks of ``block`` = 100 consecutive targets starting at
  ``range(0, N, 100)[:-1]`` (the authors drop the last start: the partial tail never enters, and
  when N is a multiple of 100 the last full block does not either); ``resamples`` = 10,000 draws
  of as many blocks with replacement, plus the identity draw. Per draw and bin the perplexity
  of the drawn targets. Reported: the bootstrap mean and standard deviation, the authors'
  interval ``sorted[k - 1] .. sorted[R - k]`` with k = R / 2000 (``sorted[4] .. sorted[9995]`` of
  10,001 values, about 99.9%), and the 2.5 / 97.5 percentile interval (95%).
- **Paired**: two models scored on the same targets and the same draws give an interval for
  baseline minus model perplexity.

Deviation: the authors draw with Python's unseeded ``random.choices``; tsrnn draws from a seeded
``torch.Generator``, so a run is repeatable.
"""
from __future__ import annotations

import math

import torch

from tsrnn.lab.data.vocab import frequency_bins

BINS = (">=10K", "1K-10K", "100-1K", "<100")  # the authors' order, most frequent first
EDGES = (100, 1_000, 10_000)
COUNTS_OVER = {"all": ("train", "valid", "test"), "train": ("train",)}
_CHUNK = 1_000  # draws per matrix product (bounds memory at 8 * _CHUNK * blocks bytes)


def word_counts(corpus, over: str = "all") -> torch.Tensor:
    """LongTensor (V,): how often each id occurs in the splits of ``over`` ("all" or "train")."""
    if over not in COUNTS_OVER:
        raise ValueError(f"counts must be one of {list(COUNTS_OVER)}, got {over!r}")
    parts = []
    for name in COUNTS_OVER[over]:
        split = getattr(corpus, name)
        parts.extend(split if isinstance(split, list) else [split])
    return torch.bincount(torch.cat(parts), minlength=len(corpus.vocab))


def target_bins(targets: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Index into BINS (0: >=10K ... 3: <100) of each target, by the word counts ``counts``."""
    return len(EDGES) - frequency_bins(counts, EDGES)[targets]


def bootstrap_starts(n: int, block: int = 100) -> torch.Tensor:
    """First target of each bootstrap block: ``range(0, n, block)[:-1]``, as the authors."""
    starts = torch.arange(0, n, block)[:-1]
    if starts.numel() == 0:
        raise ValueError(f"{n} targets make no bootstrap block of {block}: the authors' blocks need more than "
                         f"{block} targets (choose a smaller --block)")
    return starts


def authors_interval(values: torch.Tensor) -> tuple[float, float]:
    """``sorted[k - 1], sorted[R - k]`` of R + 1 draws with k = round(R / 2000) >= 1: the authors'
    sorted[4], sorted[9995] for R = 10,000. NaN draws (an empty bin in a draw) are left out."""
    finite = values[~values.isnan()].sort().values
    if finite.numel() == 0:
        return math.nan, math.nan
    draws = finite.numel() - 1
    k = max(1, round(draws / 2000))
    return finite[min(k - 1, draws)].item(), finite[max(draws - k, 0)].item()


def _summary(point: float, draws: torch.Tensor, name: str = "ppl") -> dict:
    """{name, mean, std, low, high, low95, high95} of a point estimate and its bootstrap draws;
    the statistics' keys carry the prefix ``name_`` unless name is "ppl"."""
    finite = draws[~draws.isnan()]
    low, high = authors_interval(draws)
    if finite.numel():
        low95, high95 = torch.quantile(finite, torch.tensor([0.025, 0.975], dtype=finite.dtype)).tolist()
        mean, std = finite.mean().item(), finite.std().item() if finite.numel() > 1 else 0.0
    else:
        low95 = high95 = mean = std = math.nan
    pre = "" if name == "ppl" else f"{name}_"
    return {name: point, f"{pre}mean": mean, f"{pre}std": std, f"{pre}low": low, f"{pre}high": high,
            f"{pre}low95": low95, f"{pre}high95": high95}


def _group_sums(nll: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """(..., 1 + len(BINS)) sums of ``nll`` over the last dim: all targets, then each bin."""
    one_hot = torch.nn.functional.one_hot(groups, len(BINS)).to(nll.dtype)
    per_bin = torch.einsum("...k,...kg->...g", nll, one_hot)
    return torch.cat([per_bin.sum(-1, keepdim=True), per_bin], -1)


def _draw_perplexities(block_nll: torch.Tensor, block_count: torch.Tensor, picks: torch.Tensor) -> torch.Tensor:
    """(draws, 1 + len(BINS)) perplexities: ``picks`` (draws, blocks) block indices per draw."""
    out = []
    for chunk in picks.split(_CHUNK):
        times = torch.zeros(chunk.shape[0], block_nll.shape[0], dtype=torch.float64)
        times.scatter_add_(1, chunk, torch.ones_like(chunk, dtype=torch.float64))  # how often each block is drawn
        out.append(torch.exp((times @ block_nll) / (times @ block_count)))
    return torch.cat(out)


def bin_perplexities(nll: torch.Tensor, targets: torch.Tensor, counts: torch.Tensor) -> dict[str, float]:
    """Perplexity exp(mean nll) over all targets ("all"), then over each bin of BINS (NaN for an
    empty bin): ``perplexity_table``'s point estimates without the bootstrap, for one model."""
    nll = nll.detach().double().reshape(-1)
    groups = target_bins(targets.reshape(-1), counts)
    ppl = torch.exp(_group_sums(nll, groups) / _group_sums(torch.ones_like(nll), groups))
    return dict(zip(("all", *BINS), ppl.tolist()))


def perplexity_table(nll, targets, counts, baseline_nll=None, block=100, resamples=10_000, seed=0) -> list[dict]:
    """One row per bin ("all", then BINS): {"bin", "tokens", "ppl", "mean", "std", "low", "high",
    "low95", "high95"}; with ``baseline_nll`` also "baseline_ppl" and the same statistics of
    baseline minus model perplexity ("diff", "diff_mean", ... "diff_high95").

    nll, baseline_nll: (N,) per-target negative log-likelihoods (nats); targets: (N,) ids;
    counts: (V,) word counts that define the bins (``word_counts``). ``low``/``high`` is the
    authors' interval, ``low95``/``high95`` the 95% percentile interval.
    """
    nll = nll.detach().double().reshape(-1)
    targets = targets.reshape(-1)
    if nll.numel() != targets.numel():
        raise ValueError(f"nll has {nll.numel()} values but targets {targets.numel()}")
    groups = target_bins(targets, counts)
    ones = torch.ones_like(nll)
    starts = bootstrap_starts(nll.numel(), block)
    index = starts[:, None] + torch.arange(block)  # (blocks, block); every start is at most n - 1 - block
    block_count = _group_sums(ones[index], groups[index])
    g = torch.Generator().manual_seed(seed)
    picks = torch.cat([torch.randint(len(starts), (resamples, len(starts)), generator=g),
                       torch.arange(len(starts))[None]])  # the authors append the identity draw
    tokens = _group_sums(ones, groups)
    ppl = torch.exp(_group_sums(nll, groups) / tokens)
    boot = _draw_perplexities(_group_sums(nll[index], groups[index]), block_count, picks)
    rows = [{"bin": name, "tokens": int(tokens[i]), **_summary(ppl[i].item(), boot[:, i])}
            for i, name in enumerate(("all", *BINS))]
    if baseline_nll is not None:
        baseline_nll = baseline_nll.detach().double().reshape(-1)
        if baseline_nll.shape != nll.shape:
            raise ValueError(f"baseline_nll has {baseline_nll.numel()} values but nll {nll.numel()}")
        base_ppl = torch.exp(_group_sums(baseline_nll, groups) / tokens)
        base_boot = _draw_perplexities(_group_sums(baseline_nll[index], groups[index]), block_count, picks)
        for i, row in enumerate(rows):
            row["baseline_ppl"] = base_ppl[i].item()
            row.update(_summary((base_ppl[i] - ppl[i]).item(), base_boot[:, i] - boot[:, i], "diff"))
    return rows


def _interval(low: float, high: float) -> str:
    return f"[{low:.2f}, {high:.2f}]"


def format_table(rows: list[dict]) -> str:
    """The rows as a text table; an empty bin says so instead of printing NaN."""
    paired = "diff" in rows[0]
    head = f"{'bin':<8}{'targets':>9}{'ppl':>10}{'boot mean +- sd':>19}{'99.9% (authors)':>22}{'95%':>22}"
    if paired:
        head += f"{'baseline':>10}{'base - model':>14}{'99.9% (authors)':>22}{'95%':>22}"
    lines = [head, "-" * len(head)]
    for r in rows:
        if r["tokens"] == 0:
            lines.append(f"{r['bin']:<8}{0:>9}   no target word occurs this often in the counted splits")
            continue
        line = (f"{r['bin']:<8}{r['tokens']:>9}{r['ppl']:>10.2f}{r['mean']:>11.2f} +- {r['std']:<5.2f}"
                f"{_interval(r['low'], r['high']):>22}{_interval(r['low95'], r['high95']):>22}")
        if paired:
            line += (f"{r['baseline_ppl']:>10.2f}{r['diff']:>14.2f}{_interval(r['diff_low'], r['diff_high']):>22}"
                     f"{_interval(r['diff_low95'], r['diff_high95']):>22}")
        lines.append(line)
    return "\n".join(lines)
