"""The task base class, which every training task extends, and the registry of tasks by --task name.

``Task`` fills in the common and the task's default arguments, checks --cell, builds the
optimizer, and draws an epoch's order from the seed; ``config()`` is what identifies the model: a
checkpoint only resumes or evaluates under an equal config.
"""
from __future__ import annotations

import torch

from tsrnn.lab.training import schedules

TASKS: dict[str, type] = {}


def register(cls):
    TASKS[cls.name] = cls
    return cls


class Task:
    name = ""
    unit = "items"
    cells: tuple = ()
    defaults: dict = {}
    model_keys: tuple = ()  # the arguments that define the model
    repr_keys: tuple = ("cell", "nhid")  # the arguments repr shows: the model's and the data's key sizes

    def __init__(self, args, device):
        for key, value in {**COMMON_DEFAULTS, **self.defaults}.items():
            if getattr(args, key, None) is None:
                setattr(args, key, value)
        if self.cells and args.cell not in self.cells:
            raise ValueError(f"--cell {args.cell!r} is not available for --task {self.name}; choose from {list(self.cells)}")
        self.args, self.device = args, device

    def __repr__(self) -> str:
        """The task's name and key sizes (``described()``), e.g. ``LanguageModelTask('lm',
        corpus='ptb', vocab_size=10000, cell='mts', nhid='1150,1150,400', bptt=70)``."""
        fields = "".join(f", {key}={value!r}" for key, value in self.described().items() if value is not None)
        return f"{type(self).__name__}({self.name!r}{fields})"

    def described(self) -> dict:
        """What ``repr`` shows after the name: the arguments of ``repr_keys`` (a text task adds its corpus)."""
        return {key: getattr(self.args, key, None) for key in self.repr_keys}

    def config(self) -> dict:
        return {"task": self.name, **{k: getattr(self.args, k) for k in self.model_keys}}

    def vocab_state(self):
        return None

    def loss_metrics(self, loss: float) -> dict:
        """The metrics a mean loss reports: the loss (and, for text, what it means per token)."""
        return {"loss": loss}

    def make_optimizer(self, model, averaged: bool = False):
        """--optimizer's optimizer; ``averaged``: the ASGD that NT-ASGD switches to."""
        a = self.args
        params = [p for p in model.parameters() if p.requires_grad]
        if averaged:
            return schedules.asgd(params, a.lr, a.weight_decay)
        if a.optimizer == "sgd":
            return torch.optim.SGD(params, lr=a.lr, weight_decay=a.weight_decay)
        if a.optimizer == "rmsprop":  # seed 002: RMSprop with moving-average parameter 0.9
            return torch.optim.RMSprop(params, lr=a.lr, alpha=0.9, weight_decay=a.weight_decay)
        return torch.optim.Adam(params, lr=a.lr, weight_decay=a.weight_decay)

    def lr_scale(self, batch) -> float:
        """Factor on the learning rate for this batch's step (AWD-LSTM: window length / bptt)."""
        return 1.0

    def epoch_generator(self, epoch: int, rank: int | None = None) -> torch.Generator:
        """The generator of an epoch's draws, seeded by --seed and the epoch, and by the rank for
        draws each process makes for itself (the same on every run and resume)."""
        seed = self.args.seed * 1000 + epoch
        return torch.Generator().manual_seed(seed if rank is None else seed * 64 + rank)

    def epoch_order(self, n: int, epoch: int) -> torch.Tensor:
        """The epoch's shuffled order of n training items (the same on every rank)."""
        return torch.randperm(n, generator=self.epoch_generator(epoch))

    def solved(self, metrics: dict) -> bool:
        """True when a validation result ends training early (seed 002's copy-task rule)."""
        return False


COMMON_DEFAULTS = {"seed": 0, "optimizer": "adam", "weight_decay": 0.0, "backend": "auto", "nonmono": 0, "lr_decay_after": 0,
                   "lr_decay_factor": 1.0, "patience": 0}
