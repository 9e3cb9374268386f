"""``tsrnn.load(path)``: a checkpoint or run folder of ``tsrnn train`` as a ready model.

    import tsrnn

    trained = tsrnn.load("runs/lm")                 # best.pt of the run folder (else last.pt)
    trained.model                                   # the model, in eval mode
    trained.vocab                                   # its vocabulary (text tasks), trained.task its data
    trained.evaluate("test")                        # {"loss": ..., "ppl": ...}, as validation scores
    score = trained.score("the king is dead\\n")     # lm checkpoints: every token's loss
    print(score.ppl, score.nll)

The model is rebuilt from the configuration the checkpoint records and its weights loaded; the
task's data is read from the ``--data`` the run was trained on (the embedded corpus when none) or
from ``data=``, and must give the vocabulary the checkpoint holds.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tsrnn.lab.training import checkpoint
from tsrnn.lab.training.tasks import TASKS


def checkpoint_file(path: str | Path, which: str = "best") -> Path:
    """The checkpoint a path names: a run folder's ``best.pt`` with ``which="best"`` (falling back
    to ``last.pt``) or its ``last.pt`` with ``which="last"``; any other path as given. What
    ``tsrnn.load``, ``tsrnn eval`` and ``tsrnn analyze`` read. Raises a CheckpointError naming the
    files looked for when a run folder holds none of them."""
    if which not in ("best", "last"):
        raise ValueError(f"which must be 'best' or 'last', got {which!r}")
    path = Path(path)
    if not path.is_dir():
        return path
    names = ("best.pt", "last.pt") if which == "best" else ("last.pt",)
    found = [path / name for name in names if (path / name).is_file()]
    if not found:
        raise checkpoint.CheckpointError(f"run folder {path} holds no {' or '.join(names)}")
    return found[0]


def restore(path: str | Path, data: str | None, device: torch.device) -> tuple[Any, torch.nn.Module]:
    """The task (its data read from ``data``, else the path the checkpoint records) and the model
    of a checkpoint file, on ``device``, the model in eval mode."""
    state = checkpoint.load(path)
    args = argparse.Namespace(**state["args"])
    if data is not None:
        args.data = data
    task = TASKS[state["task"]](args, device, vocab_state=state["vocab"]) if state["vocab"] is not None \
        else TASKS[state["task"]](args, device)
    if task.config() != state["config"]:
        raise checkpoint.CheckpointError(f"{path}: its recorded config does not rebuild the same model")
    model = task.build_model().to(device)
    model.load_state_dict(state["model"])
    return task, model.eval()


@dataclass(frozen=True)
class TextScore:
    """The score of a text under a language model: ``tokens`` as the model read them, ``nll`` the
    loss of each in nats (float64, one per token), ``loss`` their mean, ``ppl`` = exp(loss)."""

    tokens: list[str]
    nll: torch.Tensor
    loss: float
    ppl: float


@dataclass(frozen=True)
class Trained:
    """A model ``tsrnn train`` trained, with the task that trained it (``task.args``: its settings;
    its data: ``task.corpus`` / ``task.vocab`` for text, ``task.split(name)``)."""

    model: torch.nn.Module
    task: Any  # a tsrnn.lab.training.tasks Task
    path: Path

    @property
    def name(self) -> str:
        """The task's name (``lm``, ``copy``, ...)."""
        return self.task.name

    @property
    def vocab(self) -> Any:
        """The vocabulary of a text task (``tsrnn.lab.data.vocab.Vocabulary``), else None."""
        return getattr(self.task, "vocab", None)

    def evaluate(self, split: str = "test") -> dict:
        """The metrics validation reports, on ``split`` ("valid" or "test")."""
        if split not in ("valid", "test"):
            raise ValueError(f"split must be 'valid' or 'test', got {split!r}")
        return self.task.evaluate(self.model, split)

    @torch.no_grad()
    def score(self, text: str) -> TextScore:
        """Every token's loss under an ``lm`` checkpoint's model.

        ``text`` is tokenized as the corpus files are: the whitespace tokens of each line, then
        ``<eos>`` (so a character-level model takes space-separated characters with ``_`` between
        words, as ``ptb.char.*``); a word outside the vocabulary is ``<unk>``. The text is read as
        one stream after an ``<eos>`` (as if it followed a line end), so every token is scored, with
        the state carried across windows of the run's ``--bptt`` steps, as ``tsrnn eval`` does.
        """
        from tsrnn.lab.data.text import line_tokens
        from tsrnn.lab.data.vocab import EOS
        from tsrnn.lab.training.tasks.language import token_losses

        if self.name != "lm":
            raise ValueError(f"score() scores text under an lm checkpoint; {self.path} is a {self.name} model "
                             "(evaluate() scores its own splits)")
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if not text.split():
            raise ValueError("text holds no token")
        tokens = line_tokens(text)
        ids = self.vocab.encode([EOS, *tokens]).view(-1, 1)
        device = next(self.model.parameters()).device
        carry, losses = None, []
        bptt = self.task.args.bptt
        for start in range(0, ids.shape[0] - 1, bptt):
            x, y = ids[start:start + bptt], ids[start + 1:start + 1 + bptt]
            x = x[:y.shape[0]]
            logits, carry, _ = self.model(x.to(device), carry)
            losses.append(token_losses(logits, y.to(device)).double().cpu().reshape(-1))
        nll = torch.cat(losses)
        loss = nll.mean().item()
        return TextScore(tokens, nll, loss, math.exp(loss) if loss < 700 else math.inf)


def load(path: str | Path, *, data: str | None = None, device: torch.device | str = "cpu",
         which: str = "best") -> Trained:
    """A checkpoint (``.pt``) or run folder of ``tsrnn train`` as a ``Trained``: the model in eval
    mode on ``device``, with its task and data.

    path: a checkpoint file, or a run folder (its ``best.pt`` with ``which="best"``, the best
        validation loss, falling back to ``last.pt``; ``which="last"``: ``last.pt``).
    data: the corpus or data folder, where it is not at the path the checkpoint records.
    Raises ``tsrnn.lab.training.checkpoint.CheckpointError`` (a ValueError) naming what is wrong
    with the path or file, and FileNotFoundError when the data cannot be found.
    """
    path = checkpoint_file(path, which)
    device = torch.device(device)
    try:
        task, model = restore(path, data, device)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{exc}; pass data= the folder or file {path} was trained on") from None
    return Trained(model, task, path)
