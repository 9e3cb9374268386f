"""The recipes' values that follow the seeds' text, and the options they use (tsrnn.lab.training.recipes):
seed 000's window rule and LSTM initialization, seed 001's loss normalization, seed 002's
character-level LM, seed 004's batch, and seed 000's and seed 001's WikiText-2 settings."""
from __future__ import annotations

import argparse

import pytest
import torch
import torch.nn.functional as F

from tsrnn.lab import cli, data, models
from tsrnn.lab.training import checkpoint, recipes, schedules
from tsrnn.lab.training.tasks import TASKS


def recipe_args(recipe, task, **given):
    """The arguments a run of ``--recipe recipe --task task`` gets, with ``given`` as the user's options."""
    keys = {key for presets in recipes.RECIPES.values() for values in presets.values() for key in values}
    args = argparse.Namespace(**{key: None for key in keys | {"cell"}}, recipe=recipe, task=task)
    for key, value in given.items():
        setattr(args, key, value)
    recipes.apply(args)
    return args


# -- seed 000: windows of 70 (p 0.95) or 35, weights and biases U(+-1/H) ----------------------------------

def test_seed000_recipe_takes_the_texts_window_rule_and_initialization():
    args = recipe_args("seed000", "lm")
    assert (args.random_bptt, args.bptt, args.bptt_std, args.lstm_init) == (True, 70, 0.0, "inverse")
    assert recipe_args("seed000", "lm", bptt_std=5.0, lstm_init="sqrt").bptt_std == 5.0  # the authors' code


def test_window_lengths_without_jitter_are_bptt_or_half():
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([schedules.random_bptt_length(70, g, std=0.0) for _ in range(20_000)])
    assert set(lengths.tolist()) == {70, 35}
    assert 0.04 < (lengths == 35).double().mean() < 0.06


def test_lm_task_draws_windows_with_bptt_std():
    values = dict(task="lm", data=None, level=None, seed=0, batch_size=4, bptt=20, random_bptt=True, cell=None,
                  backend=None, optimizer=None, weight_decay=None, bptt_std=0.0)
    task = TASKS["lm"](argparse.Namespace(**values), torch.device("cpu"))
    lengths = {x.shape[0] for x, _ in task.train_batches(0, 0, 1)[:-1]}  # the last is cut at the stream's end
    assert lengths == {20, 10}


def lm(init, cell="lstm", freeze="gates", hidden=(50, 8)):
    torch.manual_seed(0)
    return models.AWDLSTMLM(10, embedding_size=8, hidden_sizes=hidden, cell=cell, mts_freeze=freeze,
                            lstm_init=init)


@pytest.mark.parametrize("cell", ["lstm", "plstm"])
def test_inverse_init_spans_one_over_h(cell):
    model, default = lm("inverse", cell), lm("sqrt", cell)
    for rnn, size, plain in zip(model.rnns, model.hidden_sizes, default.rnns):
        for name, param in rnn.named_parameters():
            if name.startswith(("weight_", "bias_")):
                largest = param.detach().abs().max().item()
                assert 0.9 / size < largest <= 1 / size, (name, largest, size)
                assert getattr(plain, name).detach().abs().max().item() > 1.5 / size  # sqrt: U(+-1/sqrt(H))


def test_inverse_init_keeps_the_fixed_timescale_biases():
    for freeze in ("gates", "all"):
        model, default = lm("inverse", "mts", freeze, (50, 40, 8)), lm("sqrt", "mts", freeze, (50, 40, 8))
        for k in (0, 1):  # the MTS layers
            size = model.hidden_sizes[k]
            torch.testing.assert_close(model.rnns[k].timescales(0), default.rnns[k].timescales(0))
            fixed, plain = model.rnns[k].bias_fixed_l0, default.rnns[k].bias_fixed_l0
            if freeze == "all":  # the g and o rows fixed from b_ih + b_hh: within 2 / H
                torch.testing.assert_close(fixed[2 * size:], plain[2 * size:] / size ** 0.5)
                assert fixed[2 * size:].abs().max() <= 2 / size


def test_lstm_init_is_checked():
    with pytest.raises(ValueError, match="lstm_init"):
        lm("paper")


# -- seed 001: the gradient normalized by the mini-batch size ---------------------------------------------

def averaging_task(loss_norm):
    values = dict(task="averaging-lm", data=None, level=None, seed=0, batch_size=4, bptt=12, cell=None, emsize=8,
                  nhid="8", dropout=0.0, backend=None, optimizer=None, weight_decay=None, loss_norm=loss_norm)
    return TASKS["averaging-lm"](argparse.Namespace(**values), torch.device("cpu"))


def gradients(model, loss):
    model.zero_grad()
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


def test_sequence_loss_norm_is_the_sum_over_each_sentence_averaged_over_the_batch():
    task = averaging_task("sequence")
    torch.manual_seed(0)
    model = task.build_model()
    x, y, _, mask = task.train_batches(0, 0, 1)[0]
    assert mask.shape[1] == 4 and not mask.all()  # 4 sentences, padded
    loss, _, count = task.train_loss(model, (x, y, None, mask), None)
    assert count == int(mask.sum())
    by_hand = sum(F.cross_entropy(model(x)[:, b][mask[:, b]], y[:, b][mask[:, b]], reduction="sum")
                  for b in range(4)) / 4
    torch.testing.assert_close(loss, by_hand)
    for ours, expected in zip(gradients(model, loss), gradients(model, by_hand)):
        torch.testing.assert_close(ours, expected)
    token, _, _ = averaging_task("token").train_loss(model, (x, y, None, mask), None)
    torch.testing.assert_close(token * count / 4, loss)  # tokens per sentence times the per-token mean


def test_seed001_recipe_normalizes_by_the_batch():
    args = recipe_args("seed001", "averaging-lm")
    assert (args.loss_norm, args.optimizer, args.lr, args.clip, args.batch_size) == ("sequence", "sgd", 1.0, 5.0, 32)


# -- seed 002: character-level PTB, ~2.15M parameters -----------------------------------------------------

@pytest.mark.parametrize("cell, units", [("lstm", 515), ("plstm", 594)])
def test_char_recipe_has_the_papers_parameter_count(cell, units):
    args = recipe_args("seed002", "lm", cell=cell)
    assert (args.level, args.batch_size, args.bptt, args.epochs, args.optimizer, args.lr, args.clip) == (
        "char", 128, 150, 50, "adam", 1e-3, 0.0)
    assert (args.emsize, args.nhid) == (units, str(units))
    model = models.AWDLSTMLM(50, embedding_size=args.emsize, hidden_sizes=(int(args.nhid),), cell=cell)
    count = sum(p.numel() for p in model.parameters())
    assert count == pytest.approx(2.15e6, rel=0.02)
    per_cell = {"lstm": 8 * units ** 2 + 58 * units + 50, "plstm": 6 * units ** 2 + 57 * units + 50}
    assert count == per_cell[cell]  # the formula in recipes.py


def test_char_recipe_defaults_to_the_plstm_and_asks_for_other_cells_sizes():
    assert recipe_args("seed002", "lm").cell == "plstm"
    with pytest.raises(ValueError, match="--emsize for --cell lstm or plstm; give it for --cell mts"):
        recipe_args("seed002", "lm", cell="mts")
    assert recipe_args("seed002", "lm", cell="mts", emsize=64, nhid="64").nhid == "64"


def test_a_given_zero_is_kept():
    assert recipe_args("seed000", "lm", clip=0.0).clip == 0.0


# -- the new flags' checks ---------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["--bptt-std", "-1"], "--bptt-std must be a finite standard deviation >= 0, got -1.0"),
    (["--bptt-std", "nan"], "--bptt-std must be a finite standard deviation >= 0, got nan"),
])
def test_bad_bptt_std_is_one_line(tmp_path, capsys, argv, message):
    assert cli.main(["train", *argv, "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.strip() == f"tsrnn train: error: {message}"


@pytest.mark.parametrize("flag", ["--lstm-init", "--loss-norm", "--level"])
def test_choices_are_checked_by_the_parser(tmp_path, capsys, flag):
    with pytest.raises(SystemExit) as stop:
        cli.main(["train", flag, "bad", "--out", str(tmp_path / "run")])
    assert stop.value.code == 2 and "invalid choice: 'bad'" in capsys.readouterr().err


def test_mlp_lm_sequence_loss_norm_sums_each_windows_words():
    """seed004's --loss-norm sequence with one stream: the loss (and so the SGD step) is the sum over the
    window's words, 128 per-word steps of Bengio et al.'s SGD in one; token: their mean."""
    from tsrnn.lab.training.tasks import language

    nll = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    mask = torch.tensor([[True, True], [True, False], [False, True]])
    assert language.normalized_loss(nll, mask, "sequence").item() == pytest.approx((1 + 3 + 2 + 6) / 2)
    assert language.normalized_loss(nll, mask, "token").item() == pytest.approx((1 + 3 + 2 + 6) / 4)
    args = recipe_args("seed004", "mlp-lm")
    assert (args.batch_size, args.bptt, args.loss_norm, args.optimizer, args.lr) == (1, 128, "sequence", "sgd", 1e-3)
    assert args.clip == 0.0  # no clipping (Bengio et al.'s steps); the task's default 1.0 would cut the summed step
    assert (args.vocab_from, args.rare_words) == ("all", "drop")  # the seed's "only analyzed" words seen > 5 times


# -- seed 004: seed004-tuned, tsrnn's training of the seed's model -------------------------------------------

def test_seed004_tuned_keeps_the_seeds_model_and_data_and_changes_only_the_training():
    seed, tuned = recipe_args("seed004", "mlp-lm"), recipe_args("seed004-tuned", "mlp-lm")
    changed = {key for key in vars(seed) if getattr(seed, key) != getattr(tuned, key)} - {"recipe"}
    assert changed == {"rare_words", "optimizer", "weight_decay", "clip", "batch_size", "loss_norm", "epochs"}
    assert (tuned.rare_words, tuned.optimizer, tuned.weight_decay, tuned.loss_norm) == ("unk", "adam", 1e-5, "token")
    assert (tuned.context, tuned.n, tuned.emsize, tuned.nhid, tuned.bptt) == ("tilt", 5, 30, "100", 128)


# -- the WikiText-2 recipes: seed 000 (the authors' code) and seed 001 §6.2 ------------------------------

def test_wikitext2_recipes_change_only_what_the_seeds_change():
    seed000, wiki000 = recipe_args("seed000", "lm"), recipe_args("seed000-wikitext2", "lm")
    assert (wiki000.batch_size, wiki000.dropouth, wiki000.dropouti, wiki000.seed) == (80, 0.2, 0.65, 1882)
    seed001, wiki001 = recipe_args("seed001", "averaging-lm"), recipe_args("seed001-wikitext2", "averaging-lm")
    assert (wiki001.emsize, wiki001.nhid, wiki001.nlayers, wiki001.dropout) == (1000, "1000", 2, 0.65)
    assert (wiki001.lr_decay_after, wiki001.lr_decay_factor, wiki001.lr, wiki001.clip) == (14, 1.15, 1.0, 5.0)
    for ptb, wiki, changed in ((seed000, wiki000, {"batch_size", "dropouth", "dropouti", "seed"}),
                               (seed001, wiki001, {"emsize", "nhid", "dropout", "lr_decay_after", "lr_decay_factor"})):
        differ = {key for key in vars(ptb) if getattr(ptb, key) != getattr(wiki, key)} - {"recipe"}
        assert differ == changed
    assert list(recipes.RECIPES["seed000-wikitext2"]) == ["lm"]  # dyck reads no corpus
    assert set(recipes.NOTES) == set(recipes.RECIPES)


def wikitext2_folder(tmp_path):
    """A WikiText-2-layout folder (train.txt, valid.txt, test.txt): the embedded tiny-shakespeare
    text's first 1,000 lines, then 150 and 150."""
    from importlib import resources

    lines = resources.files("tsrnn.lab.data").joinpath("tiny_shakespeare.txt").read_text().splitlines(keepends=True)
    folder = tmp_path / "wikitext-2"
    folder.mkdir()
    for split, part in (("train", lines[:1000]), ("valid", lines[1000:1150]), ("test", lines[1150:1300])):
        (folder / f"{split}.txt").write_text("".join(part))
    return folder


SIZES = {"lm": ["--emsize", "8", "--nhid", "12,8", "--bptt", "8"],
         "averaging-lm": ["--emsize", "8", "--nhid", "8", "--bptt", "12"]}


@pytest.mark.parametrize("recipe, task", [("seed000-wikitext2", "lm"), ("seed001-wikitext2", "averaging-lm")])
def test_wikitext2_recipe_trains_on_a_wikitext2_folder(tmp_path, capsys, recipe, task):
    """Two steps at toy sizes (the rest the recipe's) on a WikiText-2-layout folder; the run holds
    the recipe's values and the folder's vocabulary; `tsrnn train --help` lists the recipe."""
    folder = wikitext2_folder(tmp_path)
    assert cli.main(["train", "--recipe", recipe, "--data", str(folder), *SIZES[task], "--max-steps", "2", "--quiet",
                     "--out", str(tmp_path / "run")]) == 0
    state = checkpoint.load(tmp_path / "run" / "last.pt")
    assert state["task"] == task and state["progress"]["step"] == 2
    for key, value in recipes.RECIPES[recipe][task].items():
        if f"--{key.replace('_', '-')}" not in SIZES[task]:
            assert state["args"][key] == value, key
    assert state["config"]["vocab_size"] == len(data.load_text_corpus(folder).vocab)
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    assert recipe in capsys.readouterr().out
