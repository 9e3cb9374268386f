"""The training loop shared by every task: progress, validation, metrics, checkpoints, resume.

A task (``tsrnn.lab.training.tasks``) says how to build its model and optimizer, which batches make
an epoch, what a batch's loss is and how to evaluate a split; this loop does the rest:

- a tqdm progress bar (loss, items/s) on rank 0 when stderr is a terminal (not with --quiet);
  elsewhere (a file, a pipe, a scheduler's log) no bar: one line per epoch, after its validation;
- validation every ``--valid-every`` steps and at the end of each epoch, one JSON line per event
  in ``OUT/metrics.jsonl`` ("train" every ``--log-every`` steps with ``loss``, ``lr``, the
  learning rate the step's optimizer.step() used (param group 0's, after the task's per-step
  scale; the seeds' optimizers have one group, else the others may differ) and ``grad_norm``, the
  2-norm of all the step's gradients before --clip (under DDP: of the averaged gradient; null if
  not finite), "valid", "switch", and "epoch" with ``epoch_s``, the seconds the epoch's training
  steps took, validation not counted; after ``--resume``, the steps since), and the same records
  in ``--csv FILE`` and ``--tensorboard DIR`` if asked (``tsrnn.lab.training.loggers``);
- ``OUT/last.pt`` at each epoch's end, every ``--save-every`` steps and every ``--save-minutes``
  minutes (default 10), and when SIGINT or SIGTERM stops the run after the current step
  (``tsrnn.lab.training.interrupts``); ``best.pt`` on a better validation loss; all written
  atomically, in a directory no other run holds (``tsrnn.lab.training.run_dir``);
- ``--resume``: model, optimizer, every RNG, the recurrent state carried between batches, the
  position in the epoch and the kernels "auto" chose (``tsrnn.backend.reuse_choices``) come back,
  so the run continues bit-identically, in a fresh process too, from any of those checkpoints;
- a non-finite training loss stops the run (``Diverged``) before its step changes the weights;
- the seeds' schedules (``tsrnn.lab.training.schedules``): a per-step learning-rate factor from the
  task (AWD-LSTM's random BPTT), per-epoch decay (--lr-decay-after/--lr-decay-factor), NT-ASGD
  (--nonmono with --optimizer sgd; validation and best.pt then use the averaged weights),
  early stopping (--patience) and a task's own stopping rule (the copy task's accuracy).
"""
from __future__ import annotations

import math
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from tsrnn import backend
from tsrnn.lab.training import checkpoint, interrupts, loggers, run_dir, schedules
from tsrnn.lab.training.distributed import Context


@dataclass
class Progress:
    epoch: int = 0  # epochs finished
    batch: int = 0  # batches of the current epoch finished
    step: int = 0  # optimizer steps taken
    best_valid: float = math.inf
    epoch_valid: list = field(default_factory=list)  # end-of-epoch validation losses (NT-ASGD's history)
    averaging: bool = False  # switched to averaged SGD
    bad_epochs: int = 0  # epochs without a better validation loss (early stopping)
    stopped: str = ""  # why training stopped early: "patience" or "solved" ("" while it goes on)


clock = time.monotonic  # seconds, for --save-minutes


class Diverged(RuntimeError):
    """The training loss became NaN or inf; the step that would have used it was not taken."""


def _detach(carry):
    if carry is None:
        return None
    if isinstance(carry, torch.Tensor):
        return carry.detach()
    return type(carry)(_detach(c) for c in carry)


def run(task, args, ctx: Context, state: dict | None = None, log=print) -> dict:
    """Train ``task`` as ``args`` say, from the checkpoint ``state`` (read from ``args.resume``) if
    given; returns the last validation metrics. Raises ``interrupts.Interrupted`` after saving
    when a signal stopped it, ``Diverged`` on a non-finite loss."""
    out = Path(args.out)
    torch.manual_seed(args.seed)
    model = task.build_model().to(ctx.device)
    progress, carry, records = Progress(), None, None
    if state is not None:
        model.load_state_dict(state["model"])
        progress = Progress(**state["progress"])
        optimizer = task.make_optimizer(model, averaged=progress.averaging)
        optimizer.load_state_dict(state["optimizer"])
        carry = state["carry"]
        checkpoint.set_rng_state(state["rng"], args.resume)
        backend.reuse_choices(state["backend_choices"])
        if run_dir.continues_here(out, args.resume):
            records = state["metrics_records"]
        log(f"resumed from {args.resume} at step {progress.step} (epoch {progress.epoch}, batch {progress.batch})")
    else:
        optimizer = task.make_optimizer(model)
    trained = ctx.wrap(model)
    if ctx.is_main:
        run_dir.prepare(out, records, args.overwrite)
    metrics = loggers.Loggers(out, args, ctx.is_main, progress.step)
    try:
        return _train(task, args, ctx, model, trained, optimizer, progress, carry, metrics, log)
    finally:
        metrics.close()


def _train(task, args, ctx, model, trained, optimizer, progress, carry, metrics, log) -> dict:
    out = Path(args.out)
    show_bar = ctx.is_main and not args.quiet and sys.stderr.isatty()  # no carriage returns in a log file
    saved_at = clock()

    def save(name: str) -> None:
        nonlocal saved_at
        if ctx.is_main:
            args_saved = {k: v for k, v in vars(args).items() if k != "given"}
            checkpoint.save(out / name, {
                "task": task.name, "config": task.config(), "args": args_saved, "model": model.state_dict(),
                "optimizer": optimizer.state_dict(), "progress": asdict(progress), "carry": carry,
                "rng": checkpoint.rng_state(), "vocab": task.vocab_state(),
                "backend_choices": backend.tuned_choices(), "metrics_records": metrics.records})
        if name == "last.pt":
            saved_at = clock()
            metrics.flush()

    def save_due() -> bool:
        """--save-every steps or --save-minutes minutes since the last save of last.pt."""
        if args.save_every and progress.step % args.save_every == 0:
            return True
        return bool(args.save_minutes) and clock() - saved_at >= 60 * args.save_minutes

    def validate() -> dict:
        with schedules.averaged_weights(model, optimizer):  # NT-ASGD: the averaged weights
            result = {k: ctx.mean(v) for k, v in task.evaluate(model, "valid").items()}
            metrics.write(event="valid", step=progress.step, epoch=progress.epoch, **result)
            if result["loss"] < progress.best_valid:
                progress.best_valid = result["loss"]
                save("best.pt")
        return result

    def end_of_epoch(result: dict) -> bool:
        """The per-epoch schedules after the epoch's validation; True to stop training."""
        nonlocal optimizer
        loss = result["loss"]
        if args.nonmono and args.optimizer == "sgd" and not progress.averaging and \
                schedules.nt_asgd_should_switch(progress.epoch_valid, loss, args.nonmono):
            progress.averaging = True
            optimizer = task.make_optimizer(model, averaged=True)
            metrics.write(event="switch", step=progress.step, epoch=progress.epoch, optimizer="asgd")
            if ctx.is_main:
                log(f"epoch {progress.epoch}: validation loss {loss:.4g} is worse than {args.nonmono}+ epochs ago; "
                    "switching to averaged SGD (NT-ASGD)")
        improved = not progress.epoch_valid or loss < min(progress.epoch_valid)
        progress.bad_epochs = 0 if improved else progress.bad_epochs + 1  # seed 001's early-stop counter
        progress.epoch_valid.append(loss)
        progress.stopped = "patience" if args.patience and progress.bad_epochs >= args.patience else \
            "solved" if task.solved(result) else ""
        if progress.stopped and ctx.is_main:
            why = {"patience": f"no better validation loss for {args.patience} epochs",
                   "solved": "the task's stopping rule holds"}[progress.stopped]
            log(f"stopping after epoch {progress.epoch}: {why}")
        return bool(progress.stopped)

    def interrupted(signum: int) -> interrupts.Interrupted:
        save("last.pt")
        name = signal.Signals(signum).name
        where = f"step {progress.step} (epoch {progress.epoch + 1}, batch {progress.batch})"
        return interrupts.Interrupted(signum, f"interrupted by {name} after {where}; saved {out / 'last.pt'}; "
                                              f"continue with --resume {out / 'last.pt'}")

    last_valid, done = {}, False
    with interrupts.deferred() as signals:
        while progress.epoch < args.epochs and not done:
            for group in optimizer.param_groups:  # on resume too: a new --lr takes effect
                group["lr"] = schedules.epoch_lr(args, progress.epoch + 1)
            batches = task.train_batches(progress.epoch, ctx.rank, ctx.world)
            batches = batches[:ctx.min(len(batches))]  # shards can differ; DDP needs equal step counts
            bar = tqdm(total=len(batches), initial=progress.batch, desc=f"epoch {progress.epoch + 1}/{args.epochs}",
                       disable=not show_bar, leave=False, dynamic_ncols=True, mininterval=1.0)
            started, paused, items = time.perf_counter(), 0.0, 0  # paused: mid-epoch validation
            for index, batch in enumerate(batches):
                if index < progress.batch:
                    continue  # already trained on before the checkpoint we resumed from
                signum = ctx.max(signals.signal or 0)  # every rank stops at the same step
                if signum:
                    bar.close()
                    raise interrupted(signum)
                model.train()
                loss, carry_next, n = task.train_loss(trained, batch, carry)
                value = loss.item()
                if ctx.max(not math.isfinite(value)):  # on any rank
                    bar.close()
                    shown = value if not math.isfinite(value) else "not finite on another process"
                    raise Diverged(f"the training loss is {shown} at step {progress.step + 1} (epoch "
                                   f"{progress.epoch + 1}); stopped before that step. {out / 'last.pt'} holds the "
                                   "last checkpoint; a lower --lr or a --clip may help")
                carry = carry_next
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                logged = metrics.active and (progress.step + 1) % args.log_every == 0
                grad_norm = None  # the 2-norm of this step's gradients before clipping, on logged steps
                if args.clip > 0:
                    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
                elif logged:
                    grad_norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()
                                                               if p.grad is not None])
                rates = [group["lr"] for group in optimizer.param_groups]
                for group in optimizer.param_groups:  # AWD-LSTM's random BPTT: rate * window length / bptt
                    group["lr"] *= task.lr_scale(batch)
                step_lr = optimizer.param_groups[0]["lr"]  # what optimizer.step() uses
                try:
                    optimizer.step()
                except RuntimeError as exc:  # a step too large for the parameters' dtype
                    if "overflow" not in str(exc):
                        raise
                    raise Diverged(f"the optimizer's step {progress.step + 1} overflowed ({exc}); a lower --lr may "
                                   "help") from None
                for group, rate in zip(optimizer.param_groups, rates):
                    group["lr"] = rate
                carry = _detach(carry)
                progress.step, progress.batch, items = progress.step + 1, index + 1, items + n
                rate = items / max(time.perf_counter() - started - paused, 1e-9)
                bar.update(1)
                bar.set_postfix(loss=f"{value:.3f}", **{f"{task.unit}/s": f"{rate:.0f}"})
                if logged:
                    metrics.write(event="train", step=progress.step, epoch=progress.epoch, loss=value, lr=step_lr,
                                  grad_norm=grad_norm.item(), **{f"{task.unit}_per_s": round(rate, 1)})
                if args.valid_every and progress.step % args.valid_every == 0:
                    valid_started = time.perf_counter()
                    last_valid = {"step": progress.step, **validate()}
                    paused += time.perf_counter() - valid_started
                if args.max_steps and progress.step >= args.max_steps:
                    done = True
                    break
                if save_due() and progress.batch < len(batches):  # the epoch's end saves anyway
                    save("last.pt")
            bar.close()
            epoch_s = time.perf_counter() - started - paused
            if not done:
                progress.epoch, progress.batch, carry = progress.epoch + 1, 0, None
            metrics.write(event="epoch", step=progress.step, epoch=progress.epoch, epoch_s=round(epoch_s, 3),
                          **{f"{task.unit}_per_s": round(items / max(epoch_s, 1e-9), 1)})
            if not done or last_valid.get("step") != progress.step:
                last_valid = {"step": progress.step, **validate()}
                if ctx.is_main:
                    log(f"epoch {progress.epoch}, step {progress.step}, {epoch_s:.1f} s training: "
                        + ", ".join(f"valid {k} {v:.4g}" for k, v in last_valid.items() if k != "step"))
            if not done:
                done = end_of_epoch(last_valid)
            save("last.pt")  # flushes the loggers
    return {k: v for k, v in last_valid.items() if k != "step"}
