"""The seeds' schedules and recipes as small units (tsrnn.lab.training.schedules / recipes)."""
from __future__ import annotations

import argparse

import pytest
import torch

from tsrnn.lab import data as datasets
from tsrnn.lab.training import recipes, schedules
from tsrnn.lab.training.tasks import TASKS


def test_random_bptt_lengths_follow_awd_lstm():
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([schedules.random_bptt_length(70, g) for _ in range(20_000)], dtype=torch.float64)
    half = lengths < 52  # N(35, 5) draws; N(70, 5) reaches below 52 with probability 1e-4
    assert 0.04 < half.double().mean() < 0.06  # bptt / 2 with probability 0.05
    assert lengths[~half].mean() == pytest.approx(69.5, abs=0.2)  # int() truncates N(70, 5)
    assert lengths[~half].std() == pytest.approx(5.0, abs=0.2)
    assert min(schedules.random_bptt_length(6, g) for _ in range(2_000)) == 5  # at least 5


def test_nt_asgd_switches_on_the_non_monotone_rule():
    history = [5.0, 4.0, 3.0, 2.0, 1.0, 0.5]
    assert schedules.nt_asgd_should_switch(history, 5.1, nonmono=5)  # worse than min(history[:-5]) = 5.0
    assert not schedules.nt_asgd_should_switch(history, 4.9, nonmono=5)
    assert not schedules.nt_asgd_should_switch(history[:5], 99.0, nonmono=5)  # needs more than 5 epochs


def test_averaged_weights_swap_in_asgd_averages_and_back():
    model = torch.nn.Linear(3, 2)
    opt = schedules.asgd(model.parameters(), lr=0.1, weight_decay=0.0)
    for _ in range(3):
        opt.zero_grad()
        model(torch.ones(1, 3)).sum().backward()
        opt.step()
    trained = model.weight.detach().clone()
    with schedules.averaged_weights(model, opt):
        assert torch.equal(model.weight.detach(), opt.state[model.weight]["ax"])  # torch's running average
        assert not torch.equal(model.weight.detach(), trained)
    assert torch.equal(model.weight.detach(), trained)
    with schedules.averaged_weights(model, torch.optim.SGD(model.parameters(), lr=0.1)):
        assert torch.equal(model.weight.detach(), trained)  # no averages: nothing swapped


def test_learning_rate_decay_after_n_epochs():
    rates = [schedules.decayed_lr(1.0, epoch, after=12, factor=2.0) for epoch in range(1, 16)]
    assert rates[:12] == [1.0] * 12 and rates[12:] == [0.5, 0.25, 0.125]


def test_copy_task_stopping_rule():
    assert schedules.copy_solved({"accuracy": 0.999, "sequence_accuracy": 0.9995})
    assert not schedules.copy_solved({"accuracy": 1.0, "sequence_accuracy": 0.9989})


def namespace(**values):
    keys = ["task", "recipe", "cell", "lr", "optimizer", "random_bptt", "seed", "nhid"]
    return argparse.Namespace(**{k: values.get(k) for k in keys})


def test_recipe_fills_only_what_the_user_left_unset():
    args = namespace(recipe="seed000", lr=20.0)
    recipes.apply(args)
    assert (args.task, args.lr, args.optimizer, args.random_bptt, args.seed) == ("lm", 20.0, "sgd", True, 141)
    args = namespace(recipe="seed000", task="dyck")
    recipes.apply(args)
    assert (args.optimizer, args.lr) == ("adam", 1e-4)
    with pytest.raises(ValueError, match="no setting for --task copy; it sets --task lm / dyck"):
        recipes.apply(namespace(recipe="seed000", task="copy"))
    plain = namespace()
    recipes.apply(plain)
    assert plain.task == "lm" and plain.lr is None


def test_every_recipe_names_options_the_tasks_know():
    from tsrnn.lab.cli import main  # noqa: F401  (the parser defines every option)
    import tsrnn.lab.cli as cli

    parser = argparse.ArgumentParser()
    cli._train_parser(parser.add_subparsers())
    known = {a.dest for a in parser._subparsers._group_actions[0].choices["train"]._actions}
    for name, presets in recipes.RECIPES.items():
        for task, values in presets.items():
            assert task in TASKS, (name, task)
            assert set(values) <= known, (name, set(values) - known)


def lm_task(**extra):
    values = dict(task="lm", data=None, level="word", seed=0, batch_size=4, bptt=20, random_bptt=True, cell=None,
                  backend=None, optimizer=None, weight_decay=None)
    values.update(extra)
    return TASKS["lm"](argparse.Namespace(**values), torch.device("cpu"))


def test_random_bptt_windows_tile_the_stream_and_scale_the_rate():
    task = lm_task()
    batches = task.train_batches(0, 0, 1)
    stream = datasets.batchify(task.split("train"), 4)
    assert torch.equal(torch.cat([x for x, _ in batches]), stream[:sum(x.shape[0] for x, _ in batches)])
    assert all(torch.equal(y[:-1], x[1:]) for x, y in batches)
    assert all(x.shape[0] >= 5 for x, _ in batches[:-1])
    assert len({x.shape[0] for x, _ in batches}) > 3  # lengths vary
    assert task.lr_scale(batches[0]) == batches[0][0].shape[0] / 20
    assert [x.shape for x, _ in task.train_batches(0, 0, 1)] == [x.shape for x, _ in batches]  # seeded


def test_dyck_chunks_carry_the_state_through_a_batch():
    args = argparse.Namespace(task="dyck", seed=0, dyck_size="40,8,8", chunk=7, batch_size=8, cell=None, nhid="8",
                              backend=None, optimizer=None, weight_decay=None)
    task = TASKS["dyck"](args, torch.device("cpu"))
    whole = task._batches("train", 0, 0, 1, shuffle=True)
    chunks = task.train_batches(0, 0, 1)
    tokens, _, lengths = whole[0]
    pieces = [c for c in chunks[:len(range(0, tokens.shape[0], 7))]]
    assert pieces[0][3] and not any(c[3] for c in pieces[1:])  # the state restarts only at a batch's first chunk
    assert torch.equal(torch.cat([c[0] for c in pieces]), tokens)
    assert torch.equal(pieces[1][2], lengths - 7)
    model = task.build_model()
    loss, carry, n = task.train_loss(model, pieces[0], None)
    assert loss.dim() == 0 and carry is not None and n == int((lengths > 0).sum())
