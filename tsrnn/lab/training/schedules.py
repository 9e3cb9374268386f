"""The seeds' optimization schedules, each a small unit the trainer calls.

- ``random_bptt_length``: the window length of seed 000's training: ``bptt`` with probability
  0.95, else ``bptt / 2``, exactly as the seed states it (``std`` 0), or with AWD-LSTM's N(that, 5)
  jitter on top, at least 5 (``std`` 5: the code the seed's authors ran). The learning rate of
  that step is scaled by length / bptt.
- ``nt_asgd_should_switch``: AWD-LSTM's non-monotonically triggered switch from SGD to averaged
  SGD: after an epoch whose validation loss is worse than the best of the epochs more than
  ``nonmono`` (5) epochs before it.
- ``decayed_lr``: a constant rate for ``after`` epochs, then divided by ``factor`` each epoch
  (seed 001: halved after 12 epochs on PTB, divided by 1.15 after 14 on WikiText-2).
- ``copy_solved``: seed 002's copy runs stop once validation symbol and sequence accuracy both
  reach 0.999.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch


def random_bptt_length(bptt: int, generator: torch.Generator, std: float = 5.0) -> int:
    """One window length: ``max(5, int(N(base, std)))``, base = ``bptt`` with probability 0.95, else ``bptt / 2``.

    std = 5 is AWD-LSTM's training loop, which the seed-000 authors' train_mts.py keeps
    (``seq_len = max(5, int(np.random.normal(bptt, 5)))``); std = 0 is seed 000's text, "Training
    sequences were of length 70 with a probability of 0.95 and 35 with a probability of 0.05"
    (``--bptt-std 0``, the seed000 recipe's choice). Both draws are made either way.
    """
    base = bptt if torch.rand((), generator=generator, dtype=torch.float64).item() < 0.95 else bptt / 2
    return max(5, int(base + std * torch.randn((), generator=generator, dtype=torch.float64).item()))


def nt_asgd_should_switch(history: list[float], loss: float, nonmono: int = 5) -> bool:
    """AWD-LSTM's rule, ``history`` the validation losses of the epochs before this one:
    ``len(history) > nonmono and loss > min(history[:-nonmono])``."""
    return len(history) > nonmono and loss > min(history[:-nonmono])


def asgd(params, lr: float, weight_decay: float) -> torch.optim.ASGD:
    """The averaged SGD AWD-LSTM switches to: averaging from its first step (t0=0, lambd=0)."""
    return torch.optim.ASGD(params, lr=lr, t0=0, lambd=0.0, weight_decay=weight_decay)


@contextmanager
def averaged_weights(model: torch.nn.Module, optimizer: torch.optim.Optimizer):
    """Inside, the parameters hold ASGD's running averages ("ax"); outside, the trained values.
    A no-op for any other optimizer (or before ASGD has taken a step)."""
    swapped = []
    if isinstance(optimizer, torch.optim.ASGD):
        for p in model.parameters():
            ax = optimizer.state.get(p, {}).get("ax")
            if ax is not None:
                swapped.append((p, p.detach().clone()))
                p.data.copy_(ax)
    try:
        yield
    finally:
        for p, value in swapped:
            p.data.copy_(value)


def decayed_lr(lr: float, epoch: int, after: int, factor: float) -> float:
    """The rate of epoch ``epoch`` (1-based): ``lr`` up to epoch ``after``, then ``lr / factor**(epoch - after)``."""
    return lr / factor ** max(0, epoch - after)


def epoch_lr(args, epoch: int) -> float:
    """The base rate of epoch ``epoch`` (1-based): ``decayed_lr`` with --lr-decay-after, else --lr."""
    return decayed_lr(args.lr, epoch, args.lr_decay_after, args.lr_decay_factor) if args.lr_decay_after else args.lr


def copy_solved(metrics: dict, threshold: float = 0.999) -> bool:
    """Both accuracies of a copy-task validation at or above ``threshold``."""
    return metrics.get("accuracy", 0.0) >= threshold and metrics.get("sequence_accuracy", 0.0) >= threshold
