"""What ``tsrnn train`` and ``tsrnn eval`` do with their parsed arguments."""
from __future__ import annotations

import sys

import torch

from tsrnn.lab.loading import restore
from tsrnn.lab.training import checkpoint, distributed, evaluation, interrupts, loggers, recipes, resume, trainer
from tsrnn.lab.training.tasks import TASKS


def train(args) -> int:
    """Run ``tsrnn train``: 0 when it finished, ``Interrupted.code`` when a signal stopped it after saving."""
    state = None
    if args.resume:
        state = checkpoint.load(args.resume)
        args = resume.merged_args(state, args, getattr(args, "given", {}))
        finished = resume.finished_error(state, args)
        if finished:
            raise checkpoint.CheckpointError(finished)
    else:  # a checkpoint's arguments were resolved when its run started: an option newer than it keeps the default
        recipes.apply(args)
    destination = loggers.destination_error(args)  # --csv / --tensorboard, the checkpoint's on a resume
    if destination:
        raise ValueError(destination)
    ctx = distributed.setup(args.device)
    try:
        args.out = args.out or f"runs/{args.task}"
        task = TASKS[args.task](args, ctx.device)
        if state is not None and state["config"] != task.config():
            raise checkpoint.CheckpointError(f"{args.resume} holds another model: {state['config']} != {task.config()}")
        if state is not None and task.vocab_state() != state["vocab"]:
            raise checkpoint.CheckpointError(f"--data {args.data} gives another vocabulary than the one "
                                             f"{args.resume} was trained with")
        if ctx.is_main:
            print(f"tsrnn train: task {args.task}, config {task.config()}, {ctx.world} process(es) on {ctx.device}")
        try:
            result = trainer.run(task, args, ctx, state)
        except interrupts.Interrupted as stop:
            if ctx.is_main:
                print(f"tsrnn train: {stop}", file=sys.stderr)
            return stop.code
        if ctx.is_main:
            print("final validation: " + ", ".join(f"{k} {v:.4g}" for k, v in result.items()))
            print(f"checkpoints and metrics.jsonl in {args.out}")
        distributed.finish()
    finally:
        distributed.teardown()
    return 0


def evaluate(args) -> int:
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    task, model = restore(args.checkpoint, args.data, device)
    if args.delays is not None:
        return _copy_generalization(task, model, args)
    if args.baseline and not hasattr(task, "token_nll"):
        raise ValueError(f"a baseline is compared by token perplexity, for language models; {args.checkpoint} is a "
                         f"{task.name} model")
    if not hasattr(task, "token_nll"):
        print(", ".join(f"{k} {v:.4g}" for k, v in task.evaluate(model, args.split).items()))
        return 0
    nll, targets = task.token_nll(model, args.split)
    baseline = None
    if args.baseline:
        base_task, base_model = restore(args.baseline, args.data, device)
        if base_task.name != task.name:
            raise ValueError(f"the baseline {args.baseline} is a {base_task.name} model and {args.checkpoint} a "
                             f"{task.name} model; a paired comparison needs two models of the same task")
        if base_task.vocab_state() != task.vocab_state():
            raise checkpoint.CheckpointError("the two checkpoints were trained with different vocabularies")
        baseline, base_targets = base_task.token_nll(base_model, args.split)
        if not torch.equal(base_targets, targets):
            raise checkpoint.CheckpointError("the two checkpoints score different token sequences")
    counts = evaluation.word_counts(task.corpus, args.counts)
    rows = evaluation.perplexity_table(nll, targets, counts, baseline, args.block, args.resamples, args.seed)
    splits = "+".join(evaluation.COUNTS_OVER[args.counts])
    blocks = len(evaluation.bootstrap_starts(nll.numel(), args.block))
    print(f"{args.split} perplexity of {args.checkpoint}"
          + (f" vs baseline {args.baseline}" if baseline is not None else ""))
    print(f"seed 000 protocol: {nll.numel()} targets{task.scoring}; bins by word counts over {splits}; "
          f"{args.resamples} bootstrap draws (+ the identity) of {blocks} blocks of {args.block} targets; "
          f"intervals: the authors' (about 99.9%) and the 95% percentile interval")
    print(evaluation.format_table(rows))
    if task.char_level:
        loss = nll.double().mean().item()
        print(f"bits per character: {task.loss_metrics(loss)['bpc']:.4f} (mean loss {loss:.4f} nats / ln 2)")
    return 0


def _copy_generalization(task, model, args) -> int:
    """A copy-task model scored at delays it was not trained with (seed 002 A.4): fresh sequences of
    fixed delay T for each T of ``--delays``."""
    if task.name != "copy":
        raise ValueError(f"--delays evaluates copy-task checkpoints; {args.checkpoint} is a {task.name} model")
    trained = "U[{}, {}]".format(task.args.delay_min or max(1, task.args.delay // 2), task.args.delay) \
        if task.args.variable else str(task.args.delay)
    print(f"{args.split} copy accuracy of {args.checkpoint} (trained at T = {trained}) at other delays T")
    task.args.variable = False
    for delay in (int(d) for d in args.delays.split(",")):
        task.args.delay = delay
        print(f"T = {delay}: " + ", ".join(f"{k} {v:.4g}" for k, v in task.evaluate(model, args.split).items()))
    return 0
