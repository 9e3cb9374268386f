"""IMDB sentiment accuracy by review length (seed 002 §4.4, Figure 4: "IMDB sentiment
classification accuracy on different sequence lengths ... Values shown are the mean and standard
error over all sequences across all 3 random seeds within a given bin").

A review's length is its number of tokens before the 400-token cut (``Reviews.lengths``; the seed
counts words, median 202, with spaCy tokens; tsrnn's tokenizer also counts each punctuation mark).
The seed's text does not give its bin edges; tsrnn's default cuts every 50 tokens up to the cut,
[0, 50), [50, 100), ..., [350, 400), and puts every longer review in one last bin [400, ∞). A bin of
n reviews, k of them classified correctly, reports the accuracy p̂ = k / n, the seed's standard
error √(p̂ (1 - p̂) / n), and the Wilson score 95% interval (tsrnn's addition; it stays inside
[0, 1] and is not empty when p̂ is 0 or 1):

    (p̂ + z²/2n ± z √(p̂ (1 - p̂) / n + z²/4n²)) / (1 + z²/n),   z = Φ⁻¹(0.975) ≈ 1.96.

``pool`` adds the counts of several checkpoints (the seed's "across all 3 random seeds"), which
treats every review of every seed as one independent trial.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from tsrnn.lab import plot

BOUNDARIES = (50, 100, 150, 200, 250, 300, 350, 400)  # bins [0, 50), ..., [350, 400), [400, ∞)
Z95 = 1.959963984540054                               # Φ⁻¹(0.975)


def parse_boundaries(text: str) -> tuple[int, ...]:
    """``"50,100,150"`` -> (50, 100, 150): increasing positive integers; ValueError naming the text."""
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if not values or values[0] < 1 or any(b <= a for a, b in zip(values, values[1:])):
        raise ValueError(f"--length-bins must be increasing positive integers separated by commas "
                         f"(e.g. 50,100,200), got {text!r}")
    return values


def wilson_interval(correct: int, count: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion ``correct / count``; NaN, NaN when count is 0."""
    if count == 0:
        return math.nan, math.nan
    p = correct / count
    scale = 1 + z * z / count
    centre = (p + z * z / (2 * count)) / scale
    half = z * math.sqrt(p * (1 - p) / count + z * z / (4 * count * count)) / scale
    return max(0.0, centre - half), min(1.0, centre + half)


def bin_of(lengths, boundaries=BOUNDARIES) -> np.ndarray:
    """The bin of each length: i for boundaries[i-1] <= length < boundaries[i] (0 below the first)."""
    return np.searchsorted(np.asarray(boundaries), np.asarray(lengths), side="right")


def summarize(boundaries, counts, corrects) -> dict:
    """Accuracy, standard error and Wilson interval of every bin from its review and correct counts."""
    lows, highs = (0, *boundaries), (*boundaries, None)
    bins = []
    for low, high, n, k in zip(lows, highs, counts, corrects):
        n, k = int(n), int(k)
        accuracy = k / n if n else math.nan
        wilson = wilson_interval(k, n)
        bins.append({"label": f"{low}-{high - 1}" if high is not None else f"{low}+", "low": low, "high": high,
                     "count": n, "correct": k, "accuracy": accuracy,
                     "standard_error": math.sqrt(accuracy * (1 - accuracy) / n) if n else math.nan,
                     "wilson_low": wilson[0], "wilson_high": wilson[1]})
    total = int(sum(counts))
    return {"boundaries": list(boundaries), "reviews": total,
            "accuracy": int(sum(corrects)) / total if total else math.nan, "bins": bins}


def accuracy_by_length(lengths, correct, boundaries=BOUNDARIES) -> dict:
    """Per-bin counts and accuracies of reviews of ``lengths`` (N,) classified ``correct`` (N,) bool."""
    lengths, correct = np.asarray(lengths), np.asarray(correct, dtype=bool)
    if lengths.shape != correct.shape or lengths.ndim != 1:
        raise ValueError(f"lengths {lengths.shape} and correct {correct.shape} must be two vectors of one length")
    bins = bin_of(lengths, boundaries)
    size = len(boundaries) + 1
    return summarize(boundaries, np.bincount(bins, minlength=size), np.bincount(bins[correct], minlength=size))


def pool(results: list[dict]) -> dict:
    """Several ``accuracy_by_length`` results (e.g. one per seed) as one: counts added per bin."""
    if not results or any(r["boundaries"] != results[0]["boundaries"] for r in results):
        raise ValueError("pool needs at least one result, all with the same length bins")
    return summarize(results[0]["boundaries"], [sum(r["bins"][i]["count"] for r in results)
                                                for i in range(len(results[0]["bins"]))],
                     [sum(r["bins"][i]["correct"] for r in results) for i in range(len(results[0]["bins"]))])


@torch.no_grad()
def review_outcomes(task, model, split: str = "test") -> tuple[torch.Tensor, torch.Tensor]:
    """Each review's length and whether the model classifies it correctly, (N,) int64 and (N,) bool,
    in the split's order (an IMDB ``SentimentTask`` and its model)."""
    model.eval()
    correct = [(logits.argmax(-1) == labels).cpu() for logits, labels in
               (task.logits_and_labels(model, batch) for batch in task.eval_batches(split))]
    return getattr(task.data, split).lengths, torch.cat(correct)


def imdb_by_length(task, model, split: str = "test", boundaries=BOUNDARIES) -> dict:
    """Seed 002 Figure 4 for one IMDB checkpoint: its accuracy on ``split`` per review-length bin."""
    lengths, correct = review_outcomes(task, model, split)
    return {"split": split, "length": "tokens before the cut", **accuracy_by_length(lengths, correct, boundaries)}


def figure(curves: dict, path) -> None:
    """Accuracy per length bin with Wilson 95% intervals, one line per entry of ``curves``
    ({label: result}, e.g. pLSTM, LSTM, chrono as seed 002 Figure 4); counts under the bins."""
    fig = plot.new_figure(figsize=(7.5, 4.2))
    ax = fig.add_subplot()
    first = next(iter(curves.values()))["bins"]
    x = np.arange(len(first))
    for i, (label, result) in enumerate(curves.items()):
        acc = np.array([b["accuracy"] for b in result["bins"]], dtype=float)
        low = np.array([b["wilson_low"] for b in result["bins"]], dtype=float)
        high = np.array([b["wilson_high"] for b in result["bins"]], dtype=float)
        ax.errorbar(x + 0.08 * (i - (len(curves) - 1) / 2), acc, yerr=[acc - low, high - acc], marker="o",
                    markersize=4, capsize=3, label=f"{label} (overall {result['accuracy']:.3f})")
    ax.set_xticks(x, [f"{b['label']}\nn={b['count']}" for b in first], fontsize="x-small")
    ax.set_xlabel("review length (tokens)")
    ax.set_ylabel("accuracy (Wilson 95% interval)")
    ax.set_title("IMDB sentiment accuracy by review length")
    ax.legend(fontsize="x-small")
    plot.save(fig, path)
