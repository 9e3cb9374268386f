"""Seconds per training epoch of the variable-length tasks, for two trees of tsrnn side by side.

    python bench/task_epochs.py --tree before=/path/to/old/tree --tree after=. [--rounds 2] [--epochs 3]

Each round runs ``python -m tsrnn train`` once per task and tree, the trees alternating in
order from round to round, each run in its own process started in its tree's root (so that
tree's ``tsrnn`` is the one imported: build or copy its ``tsrnn/_C*.so`` first). Per task and
tree it prints the best of the epochs' ``epoch_s`` (the "epoch" records of metrics.jsonl: the
training steps only, no validation) over every run and their median leaving out each run's
first epoch (which also verifies and times the ``auto`` candidates of each new shape), the
final validation metrics of each run, and ``real``, the fraction of the padded (T, B) steps of
the first epoch's training batches that are real steps. ``--check`` instead runs each task's first three
training batches from the same weights in each tree and prints how far the losses and gradients
differ.

The tasks, at ``tsrnn train``'s defaults but for --epochs:

- freq: frequency discrimination, pLSTM 110, synchronous (resolution 1): 15 to 125 samples;
- imdb: the sentiment model (pLSTM 154, batch 64, 100-d trained embedding) on a synthetic
  aclImdb folder this script writes (``write_reviews``: 1,000 training and 200 test reviews whose
  word counts are log-normal around 180 words, cut to 400 by the loader, as real reviews are);
- dyck: Dyck-2, MTS-LSTM 64, 10,000 words of 2 to 200 symbols;
- copy-variable: the variable copy task, pLSTM 128, 100 batches of 32 an epoch, delays U{10..20}
  (30 to 40 steps);
- copy-variable-long: the same with delays U{20..200} (40 to 220 steps);
- dyck-chunk (not run unless named): Dyck-2 trained in chunks of 50 steps, the state carried.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

TASKS = {
    "freq": ["--task", "freq"],
    "imdb": ["--task", "imdb", "--data", "{reviews}"],
    "dyck": ["--task", "dyck"],
    "copy-variable": ["--task", "copy", "--variable"],
    "copy-variable-long": ["--task", "copy", "--variable", "--delay-min", "20", "--delay", "200"],
    "dyck-chunk": ["--task", "dyck", "--chunk", "50"],
}

POSITIVE = "great loved wonderful fun best excellent superb enjoyed beautiful brilliant".split()
NEGATIVE = "awful hated boring bad worst terrible dull poor waste stupid".split()


def write_reviews(root: Path, n_train: int = 1000, n_test: int = 200, seed: int = 0) -> Path:
    """A synthetic aclImdb folder: reviews of log-normal word counts (median 180, σ 0.75) drawn
    from 3,000 filler words, with a sentiment word of the review's polarity at rate 1/20."""
    rng = random.Random(seed)
    filler = [f"w{k}" for k in range(3000)]
    for split, n in (("train", n_train), ("test", n_test)):
        for polarity, words in (("pos", POSITIVE), ("neg", NEGATIVE)):
            folder = root / split / polarity
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n // 2):
                count = max(5, min(2000, round(math.exp(rng.gauss(math.log(180), 0.75)))))
                text = " ".join(rng.choice(words) if rng.random() < 0.05 else rng.choice(filler) for _ in range(count))
                (folder / f"{i}_{polarity}.txt").write_text(text + ".")
    return root


def real_fraction(tree: Path, argv: list[str]) -> float:
    """Real steps / padded steps over the first epoch's training batches of ``argv``'s task."""
    code = f"""
import argparse, sys, torch
from tsrnn.lab import cli
from tsrnn.lab.training import recipes
from tsrnn.lab.training.tasks import TASKS
parser = argparse.ArgumentParser(); cli._train_parser(parser.add_subparsers(dest="command"))
args = parser.parse_args(["train", *{argv!r}]); recipes.apply(args)
real = padded = 0
for b in TASKS[args.task](args, torch.device("cpu")).train_batches(0, 0, 1):
    if hasattr(b, "lengths"): lengths, steps = b.lengths, b.x.shape[0]          # freq
    elif args.task == "imdb": lengths, steps = b[1], b[0].shape[0]
    elif args.task == "dyck": lengths, steps = b[2], b[0].shape[0]
    else: lengths, steps = (b[1] != -100).sum(0), b[1].shape[0]                # copy: IGNORE_INDEX padding
    real, padded = real + int(lengths.sum()), padded + steps * len(lengths)
print(real / padded)
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONPATH": str(tree)})
    return float(result.stdout.strip().splitlines()[-1])


FIRST_BATCHES = """
import argparse, sys, torch
from tsrnn.lab import cli
from tsrnn.lab.training import recipes
from tsrnn.lab.training.tasks import TASKS
torch.set_num_threads(1)
parser = argparse.ArgumentParser(); cli._train_parser(parser.add_subparsers(dest="command"))
args = parser.parse_args(["train", *ARGV]); recipes.apply(args)
task = TASKS[args.task](args, torch.device("cpu"))
torch.manual_seed(args.seed)
model = task.build_model()
carry, losses = None, []
for batch in task.train_batches(0, 0, 1)[:3]:
    model.zero_grad()
    loss, carry, _ = task.train_loss(model, batch, carry)
    loss.backward()
    losses.append(loss.detach())
    carry = None if carry is None else tuple(c.detach() for c in carry)
grads = {k: p.grad for k, p in model.named_parameters() if p.grad is not None}
torch.save({"loss": torch.stack(losses), "grads": grads}, OUT)
"""


def first_batches(trees: dict, argv: list[str], runs: Path) -> tuple[float, float]:
    """The task's first three training batches from the same weights in each tree (one thread, no
    optimizer step): the largest relative difference between trees of the losses and of the
    third batch's gradients."""
    import torch

    results = []
    for name, tree in trees.items():
        out = runs / f"first-{name}.pt"
        code = FIRST_BATCHES.replace("ARGV", repr(argv)).replace("OUT", repr(str(out)))
        subprocess.run([sys.executable, "-c", code], cwd=tree, check=True, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(tree)})
        results.append(torch.load(out, weights_only=True))
    first, other = results[0], results[-1]
    loss = ((first["loss"] - other["loss"]).abs() / first["loss"].abs()).max().item()
    grad = max(((g - other["grads"][k]).abs().max() / g.abs().max().clamp(min=1e-30)).item()
               for k, g in first["grads"].items())
    return loss, grad


def train(tree: Path, argv: list[str], out: Path) -> dict:
    """One ``tsrnn train`` run in ``tree``: its epochs' seconds and final validation metrics."""
    command = [sys.executable, "-m", "tsrnn", "train", *argv, "--out", str(out), "--quiet"]
    started = time.perf_counter()
    subprocess.run(command, cwd=tree, check=True, capture_output=True, text=True,
                   env={**os.environ, "PYTHONPATH": str(tree)})
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r["event"] == "valid"][-1]
    return {"epoch_s": [r["epoch_s"] for r in records if r["event"] == "epoch"],
            "valid": {k: v for k, v in valid.items() if k not in ("time", "event", "step", "epoch")},
            "wall_s": round(time.perf_counter() - started, 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", action="append", required=True, help="NAME=PATH, a tsrnn tree (repeat)")
    p.add_argument("--tasks", default=",".join(t for t in TASKS if t != "dyck-chunk"), help="comma-separated, of "
                   f"{', '.join(TASKS)}")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--runs", default="runs/task_epochs", help="where the runs and the synthetic reviews go")
    p.add_argument("--json", help="write every run's numbers here")
    p.add_argument("--check", action="store_true", help="only compare the first three batches' losses and "
                   "gradients between the first and the last tree")
    args = p.parse_args(argv)
    trees = dict(item.split("=", 1) for item in args.tree)
    trees = {name: Path(path).resolve() for name, path in trees.items()}
    runs = Path(args.runs).resolve()
    reviews = runs / "aclImdb"
    if not (reviews / "test" / "neg").is_dir():
        write_reviews(reviews)
    tasks = args.tasks.split(",")
    argvs = {t: [a.format(reviews=reviews) for a in TASKS[t]] + ["--epochs", str(args.epochs), "--seed",
                                                                  str(args.seed)] for t in tasks}
    if args.check:
        for t in tasks:
            loss, grad = first_batches(trees, argvs[t], runs)
            print(f"{t}: first three batches, max relative difference of the losses {loss:.1e}, "
                  f"of the third batch's gradients {grad:.1e}")
        return 0
    results = {t: {name: [] for name in trees} for t in tasks}
    fractions = {t: real_fraction(next(iter(trees.values())), argvs[t]) for t in tasks}
    names = list(trees)
    for r in range(args.rounds):
        order = names if r % 2 == 0 else names[::-1]
        for t in tasks:
            for name in order:
                run = train(trees[name], argvs[t], runs / f"{t}-{name}-{r}")
                results[t][name].append(run)
                print(f"round {r + 1} {t} {name}: epochs {run['epoch_s']} s, valid {run['valid']}", flush=True)
    print("\n| task | real steps | " + " | ".join(f"{n} best / median s" for n in names)
          + f" | {names[-1]} / {names[0]} (best) |")
    print("|---|---:|" + "---:|" * len(names) + "---:|")
    for t in tasks:
        best = {n: min(s for run in results[t][n] for s in run["epoch_s"]) for n in names}
        median = {n: statistics.median(s for run in results[t][n] for s in run["epoch_s"][1:] or run["epoch_s"])
                  for n in names}  # a run's first epoch also verifies and times auto's paths per shape
        print(f"| {t} | {fractions[t]:.2f} | " + " | ".join(f"{best[n]:.2f} / {median[n]:.2f}" for n in names)
              + f" | {best[names[-1]] / best[names[0]]:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"argv": argvs, "real_fraction": fractions, "runs": results},
                                              indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
