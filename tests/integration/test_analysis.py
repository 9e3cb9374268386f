"""tsrnn.lab.analysis and `tsrnn analyze`: each analysis on a tiny model checked by value (an MTS
layer's estimated timescales follow the assigned ones, an ablated word changes no earlier state,
zeroing a layer changes perplexity, an ablated unit reaches nothing), then the command end to end
on a checkpoint of each task it serves."""
import json
import math

import pytest
import torch

import tsrnn
from tsrnn.lab.data import copy as copy_data
from tsrnn.lab import cli, plot
from tsrnn.memory import timescales as ts
from tsrnn.lab.analysis import forget_map, passes, plstm, receptive_fields, routing, timescales, word_ablation
from tsrnn.memory.contexts import BufferContext, TILTContext
from tsrnn.lab.models import AWDLSTMLM, CopyModel, SequenceClassifier
from tsrnn.lab.loading import restore

pytest.importorskip("matplotlib")

CPU = torch.device("cpu")


def tiny_lm(cell="mts", seed=0, sizes=(24, 48, 12)):
    torch.manual_seed(seed)
    model = AWDLSTMLM(50, embedding_size=sizes[-1], hidden_sizes=sizes, cell=cell, backend="reference")
    return model.double().eval()


def stream(n=280, vocab=50, seed=1):
    return torch.randint(vocab, (n,), generator=torch.Generator().manual_seed(seed))


# -- the watch hook and the trace reductions ----------------------------------------------------

def test_watch_hands_the_forget_gates_and_keeps_the_outputs():
    torch.manual_seed(0)
    lstm = tsrnn.LSTM(5, 7, num_layers=2, backend="reference").double()
    x = torch.randn(6, 3, 5, dtype=torch.float64)
    plain = lstm(x)[0]
    seen = []
    with lstm.watch(seen.append):
        watched = lstm(x)[0]
    assert torch.equal(plain, watched)
    assert len(seen) == 1 and len(seen[0]) == 2
    for got, want in zip(seen[0], lstm.forget_gates(x)):
        torch.testing.assert_close(got["f"], want)
    lstm(x)  # outside the block: no more calls
    assert len(seen) == 1


def test_mean_forget_gates_pools_every_call():
    torch.manual_seed(0)
    lstm = tsrnn.LSTM(4, 6, backend="reference").double()
    xs = [torch.randn(5, 2, 4, dtype=torch.float64), torch.randn(3, 4, 4, dtype=torch.float64)]
    means = passes.mean_forget_gates(lstm, lambda: [lstm(x) for x in xs])
    gates = torch.cat([lstm.forget_gates(x)[0].reshape(-1, 6) for x in xs])
    torch.testing.assert_close(means[0], gates.mean(0))
    with pytest.raises(ValueError, match="no data"):
        passes.mean_forget_gates(lstm, lambda: None)


def test_narrow_gaussian_fit():
    g = torch.Generator().manual_seed(0)
    narrow = 0.5 + 0.1 * torch.randn(400, generator=g, dtype=torch.float64)
    fit = ts.fit_narrow_gaussian(narrow.abs())
    assert abs(fit.mu - 0.5) <= 0.02 and fit.sigma == 0.1 and fit.statistics.shape == fit.mus.shape
    assert fit.statistic < ts.fit_inverse_gamma(narrow.abs()).statistic
    wide = ts.inverse_gamma(2000, 1.4, generator=g)
    assert ts.fit_inverse_gamma(wide).statistic < ts.fit_narrow_gaussian(wide).statistic
    with pytest.raises(ValueError):
        ts.fit_narrow_gaussian([1.0, 2.0], sigma=0.0)
    with pytest.raises(ValueError):
        ts.fit_narrow_gaussian([1.0, -2.0])
    with pytest.raises(ValueError):
        ts.fit_narrow_gaussian([1.0], mus=[[0.5]])


# -- seed 000 -----------------------------------------------------------------------------------

def test_estimated_timescales_of_a_fixed_layer_follow_the_assigned_ones():
    model = tiny_lm()
    layers = timescales.lm_layer_timescales(model, passes.lm_windows(stream(), 70), CPU)
    assert [layer.layer for layer in layers] == [1, 2, 3]
    assert layers[2].assigned is None and layers[1].assigned is not None
    torch.testing.assert_close(layers[1].assigned, model.rnns[1].timescales(0))
    summary = timescales.summarize(layers)
    assert summary["layers"][1]["assigned_vs_estimated"]["pearson_log"] > 0.9
    assert summary["layers"][1]["assigned_vs_estimated"]["spearman"] > 0.9
    assert summary["all"]["units"] == 24 + 48 + 12
    fit = summary["layers"][1]["inverse_gamma"]
    assert fit["alpha"] == ts.fit_inverse_gamma(layers[1].estimated).alpha
    assert fit["ks"] == min(fit["curve"]["ks"])


def test_forget_gate_map_sorts_and_groups_units():
    gates = torch.tensor([[0.9, 0.1, 0.5], [0.7, 0.3, 0.5]], dtype=torch.float64)
    out = forget_map.forget_gate_map(gates, group=2, assigned=torch.tensor([30.0, 1.0, 3.0]))
    assert out["order"] == [1, 2, 0]
    torch.testing.assert_close(torch.tensor(out["map"], dtype=torch.float64),
                               torch.tensor([[0.3, 0.9], [0.4, 0.7]], dtype=torch.float64))
    assert out["group_assigned"] == [2.0, 30.0]


def test_lm_forget_maps_read_the_authors_window():
    model = tiny_lm()
    windows = passes.lm_windows(stream(500), 70)
    out = forget_map.lm_forget_maps(model, windows, CPU)
    assert out["window"] == 5 and out["first_token"] == 350
    assert [len(layer["map"]) for layer in out["layers"]] == [70, 70, 70]
    assert [len(layer["map"][0]) for layer in out["layers"]] == [3, 5, 2]  # groups of 10
    state = None
    for x in windows[:5]:
        state = model(x, state)[1]
    embedded = model.encoder(windows[5])
    want = model.rnns[0].forget_gates(embedded, tuple(state[0][:2]))[0][:, 0]
    got = forget_map.forget_gate_map(want)
    assert out["layers"][0]["map"] == got["map"]


def test_an_ablated_word_changes_no_earlier_state():
    model = tiny_lm()
    windows = passes.lm_windows(stream(), 9)
    state = model(windows[0])[1]
    x = windows[1]
    before = [p.clone() for p in model.parameters()]
    cells = word_ablation.ablated_cell_states(model, x, state)
    steps = x.shape[0]
    assert [c.shape for c in cells] == [(steps, steps + 1, h) for h in (24, 48, 12)]
    for c in cells:  # float64; rows of one batched GEMM may round differently, so not bit-equal
        for j in range(steps):
            assert torch.allclose(c[:j, j], c[:j, steps], rtol=0, atol=1e-13)  # before the ablated word: unchanged
            assert (c[j:, j] - c[j:, steps]).norm(dim=-1).min() > 1e-9         # from it on: changed
    plain = state
    for t in range(steps):  # the unablated row is the plain stepwise run
        plain = model(x[t:t + 1], plain)[1]
    torch.testing.assert_close(cells[1][-1, steps], plain[1][1][0, 0])
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert not model.rnns[0]._forward_pre_hooks  # the hook is gone


def test_word_ablation_curves():
    model = tiny_lm()
    windows = passes.lm_windows(stream(300), 10)
    everything = {"layer": 2, "units": torch.arange(48), "timescale": 1.0}
    out = word_ablation.word_ablation(model, windows, CPU, groups=[everything])
    assert out["windows"] == 29 and out["distance"] == list(range(10))  # 299 targets: the 30th window is short
    assert all(v > 0 for layer in out["layers"] for v in layer["change"])
    torch.testing.assert_close(torch.tensor(out["groups"][0]["change"]), torch.tensor(out["layers"][1]["change"]))


@pytest.fixture(scope="module")
def lm_checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("lm")
    assert cli.main(["train", "--task", "lm", "--emsize", "8", "--nhid", "16,24,8", "--bptt", "70",
                     "--batch-size", "8", "--max-steps", "40", "--out", str(out), "--quiet"]) == 0
    return out / "last.pt"


def test_routing_ratios_and_zeroing_a_whole_layer(lm_checkpoint):
    task, model = restore(lm_checkpoint, None, CPU)
    nll = task.token_nll(model, "test")[0]
    order = torch.arange(24)
    full = routing.routing(task, model, 2, order, torch.ones(24), chunk=24)
    assert math.isclose(full["intact_ppl"][0], nll.double().mean().exp().item(), rel_tol=1e-9)
    assert len(full["chunks"]) == 1 and abs(full["chunks"][0]["ratio"][0] - 1) > 1e-3
    split = routing.routing(task, model, 2, order, torch.arange(24.0), chunk=7)
    assert [len(c["units"]) for c in split["chunks"]] == [7, 7, 7, 3]
    assert split["chunks"][0]["timescale"] == 3.0
    assert sum(split["targets"][1:]) == split["targets"][0] == nll.numel()
    torch.testing.assert_close(task.token_nll(model, "test")[0], nll)  # the hooks are gone
    assert routing.chunk_size(1150) == 50 and routing.chunk_size(128) == 6 and routing.chunk_size(10) == 1
    assert word_ablation.group_size(1150) == 100 and word_ablation.group_size(128) == 11


def test_zeroed_output_reaches_the_next_layer_only():
    model = tiny_lm()
    x = stream(12)[:, None]
    units = torch.tensor([0, 5])
    seen = {}
    hook = model.rnns[2].register_forward_pre_hook(lambda m, args: seen.update(x=args[0]))
    with routing.ZeroedOutput(model.rnns[1], units):
        _, state, extras = model(x)
    hook.remove()
    assert torch.all(seen["x"][..., units] == 0) and torch.all(extras.raw_outputs[1][..., units] == 0)
    assert torch.all(state[1][0][..., units] != 0)  # the layer's own state is untouched


# -- seed 002 -----------------------------------------------------------------------------------

def test_an_ablated_unit_reaches_nothing():
    torch.manual_seed(0)
    model = CopyModel("plstm", hidden_size=12, backend="reference").double().eval()
    x, _ = copy_data.copy_task(3, 6, generator=torch.Generator().manual_seed(0))
    before = model(x)
    saved = model.rnn.weight_hh_l0.detach().clone()
    units = torch.tensor([2, 7])
    with plstm.AblatedUnits(model.rnn, units):
        ablated = model(x)
        with torch.no_grad():
            model.rnn.weight_ih_l0[units] += 1.0        # every gate of the ablated units (r, g, o rows)
            model.rnn.weight_ih_l0[units + 12] += 1.0
            model.rnn.weight_ih_l0[units + 24] += 1.0
        torch.testing.assert_close(model(x), ablated)   # their activity is invisible
    assert not torch.allclose(ablated, before)
    assert torch.equal(model.rnn.weight_hh_l0, saved)
    with plstm.AblatedUnits(model.rnn, torch.arange(12)):
        everything = model(x)
    torch.testing.assert_close(everything, model.output.bias.expand_as(everything))
    with pytest.raises(ValueError, match="single-layer"):
        plstm.AblatedUnits(tsrnn.LSTM(3, 4, num_layers=2), units)


def test_an_ablated_unit_reaches_a_classifiers_readout_neither():
    torch.manual_seed(0)
    model = SequenceClassifier("plstm", 2, 6, 3, backend="reference").double().eval()
    x, lengths = torch.randn(9, 4, 2, dtype=torch.float64), torch.tensor([9, 3, 5, 1])
    units = torch.tensor([1, 4])
    with plstm.AblatedUnits(model.rnn, units):
        ablated = model(x, lengths)
        with torch.no_grad():
            model.rnn.weight_ih_l0[units] += 1.0         # the ablated units' r, g, o rows
            model.rnn.weight_ih_l0[units + 6] += 1.0
            model.rnn.weight_ih_l0[units + 12] += 1.0
        torch.testing.assert_close(model(x, lengths), ablated)  # the readout of h_n does not see them
    with plstm.AblatedUnits(model.rnn, torch.arange(6)):
        everything = model(x, lengths)
    torch.testing.assert_close(everything, model.output.bias.expand_as(everything))


def test_later_reset_units_keep_their_age_through_the_delay():
    ages = torch.zeros(10 + 8 + 10, 4, 3, dtype=torch.float64)
    ages[17, :, 0] = 8.0   # never reset since the symbols
    ages[17, :, 1] = 4.0   # exactly half the delay
    ages[17, :, 2] = 3.9
    assert plstm.later_reset_units(ages, delay=8).tolist() == [True, True, False]


def test_learned_p_reports_every_player():
    model = tsrnn.PowerLawLSTM(3, 5, num_layers=2)
    layers = plstm.learned_p(model)
    assert [entry["layer"] for entry in layers] == [1, 2]
    assert layers[1]["p"] == model.p(1).double().tolist()
    assert plstm.learned_p(tsrnn.PowerLawLSTM(3, 4, fixed_p=1.5))[0]["p"] == [1.5] * 4


# -- seed 004 -----------------------------------------------------------------------------------

def test_receptive_fields_are_the_context_kernels():
    context = TILTContext(3)
    out = receptive_fields.receptive_fields(context, length=40)
    torch.testing.assert_close(torch.tensor(out["kernels"], dtype=torch.float64), context.kernels(40))
    assert out["peak_lag"] == context.kernels(40).argmax(1).tolist()
    assert out["tau_star"] == context.tau_star.tolist()
    assert receptive_fields.is_tilt(context) and not receptive_fields.is_tilt(BufferContext(3))


# -- the command --------------------------------------------------------------------------------

def analyze(checkpoint, out, *extra):
    return cli.main(["analyze", str(checkpoint), "--out", str(out), "--quiet", *extra])


def summary_of(out):
    return json.loads((out / "summary.json").read_text())


def is_png(path):
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_analyze_an_mts_lm(lm_checkpoint, tmp_path):
    assert analyze(lm_checkpoint, tmp_path, "--windows", "4") == 0
    summary = summary_of(tmp_path)
    analyses = summary["analyses"]
    assert list(analyses) == ["timescales", "forget_gates", "word_ablation", "routing"]
    for entry in analyses.values():
        assert entry["figures"] and all(is_png(tmp_path / f) for f in entry["figures"])
    assert "assigned_vs_estimated.png" in analyses["timescales"]["figures"]
    assert analyses["timescales"]["layers"][1]["assigned_vs_estimated"]["pearson_log"] > 0.9
    assert analyses["word_ablation"]["windows"] == 4
    assert [len(g["units"]) for g in analyses["word_ablation"]["groups"]] == [2] * 12
    assert analyses["routing"]["sorted_by"] == "assigned" and len(analyses["routing"]["chunks"]) == 24
    timescales_l2 = analyses["timescales"]["layers"][1]["assigned"]
    first = analyses["routing"]["chunks"][0]
    assert first["timescale"] == pytest.approx(sum(timescales_l2[u] for u in first["units"]) / len(first["units"]))
    assert first["timescale"] == pytest.approx(max(timescales_l2))  # longest first


def test_analyze_only_some_analyses_and_windows_in_every_one(lm_checkpoint, tmp_path):
    assert analyze(lm_checkpoint, tmp_path, "--only", "routing,forget_gates", "--windows", "2") == 0
    summary = summary_of(tmp_path)
    assert summary["finished"] and summary["only"] == ["routing", "forget_gates"] and summary["windows"] == 2
    assert list(summary["analyses"]) == ["forget_gates", "routing"]  # in the order they run
    assert not (tmp_path / "timescales.png").exists() and not (tmp_path / "word_ablation.png").exists()
    routed = summary["analyses"]["routing"]
    assert routed["windows"] == 2 and routed["targets"][0] == 2 * 70  # the first 2 windows' targets
    task, model = restore(lm_checkpoint, None, CPU)
    nll = task.token_nll(model, "test", tokens=2 * 70 + 1)[0]
    assert routed["intact_ppl"][0] == pytest.approx(nll.double().mean().exp().item(), rel=1e-12)


def test_summary_holds_each_analysis_as_it_finishes(lm_checkpoint, tmp_path, monkeypatch, capsys):
    def fails(*args, **kwargs):
        assert summary_of(tmp_path)["analyses"].keys() == {"timescales", "forget_gates", "word_ablation"}
        raise ValueError("routing stopped")

    monkeypatch.setattr(routing, "routing", fails)
    assert analyze(lm_checkpoint, tmp_path, "--windows", "2") == 2
    assert "routing stopped" in capsys.readouterr().err
    summary = summary_of(tmp_path)
    assert not summary["finished"] and list(summary["analyses"]) == ["timescales", "forget_gates", "word_ablation"]
    assert not list(tmp_path.glob("*.part"))


def test_analyze_a_plain_lm_and_a_plstm_lm(tmp_path):
    for cell in ("lstm", "plstm"):
        run = tmp_path / cell
        assert cli.main(["train", "--task", "lm", "--cell", cell, "--emsize", "8", "--nhid", "12,8,8", "--bptt",
                         "70", "--batch-size", "8", "--max-steps", "2", "--out", str(run), "--quiet"]) == 0
        assert analyze(run / "last.pt", run / "analysis", "--windows", "3") == 0
        analyses = summary_of(run / "analysis")["analyses"]
        assert all(layer["assigned"] is None for layer in analyses["timescales"]["layers"])
        assert "assigned_vs_estimated.png" not in analyses["timescales"]["figures"]
        assert analyses["routing"]["sorted_by"] == "estimated"
        assert ("learned_p" in analyses) == (cell == "plstm")


def test_analyze_a_plstm_copy_model(tmp_path):
    assert cli.main(["train", "--task", "copy", "--nhid", "16", "--batch-size", "8", "--delay", "12",
                     "--max-steps", "3", "--out", str(tmp_path), "--quiet"]) == 0
    assert analyze(tmp_path / "last.pt", tmp_path / "analysis") == 0
    analyses = summary_of(tmp_path / "analysis")["analyses"]
    copy = analyses["copy"]
    assert copy["ablation"]["ablated"] == [0, 5, 10, 15]
    assert set(copy["ablation"]["orders"]) == {"random", "later-reset first"}
    later = copy["ablation"]["orders"]["later-reset first"]["order"][:len(copy["later_reset"])]
    assert sorted(later) == copy["later_reset"]
    task, model = restore(tmp_path / "last.pt", None, CPU)
    assert copy["ablation"]["orders"]["random"]["accuracy"][0] == task.evaluate(model, "test")["accuracy"]
    assert len(copy["reference_time"]) == 12 + 20
    assert analyses["learned_p"]["layers"][0]["p"] == model.rnn.p(0).double().tolist()
    assert {"unit_ablation.png", "reset_traces.png"} <= set(copy["figures"])


def test_analyze_a_tilt_mlp_lm(tmp_path):
    assert cli.main(["train", "--task", "mlp-lm", "--context", "tilt", "--emsize", "8", "--nhid", "16",
                     "--batch-size", "4", "--bptt", "16", "--n", "3", "--max-steps", "1", "--out", str(tmp_path),
                     "--quiet"]) == 0
    assert analyze(tmp_path / "last.pt", tmp_path / "analysis") == 0
    fields = summary_of(tmp_path / "analysis")["analyses"]["receptive_fields"]
    _, model = restore(tmp_path / "last.pt", None, CPU)
    assert fields["tau_star"] == model.context.tau_star.tolist()
    assert is_png(tmp_path / "analysis" / "receptive_fields.png")


def test_analyze_errors_are_one_line(tmp_path, capsys, monkeypatch):
    assert cli.main(["analyze", str(tmp_path / "missing.pt")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli.main(["train", "--task", "mlp-lm", "--context", "buffer", "--emsize", "8", "--nhid", "16",
                     "--batch-size", "4", "--bptt", "16", "--n", "3", "--max-steps", "1", "--out",
                     str(tmp_path / "buffer"), "--quiet"]) == 0
    assert analyze(tmp_path / "buffer" / "last.pt", tmp_path / "a") == 2
    assert "Buffer-MLP" in capsys.readouterr().err
    assert cli.main(["train", "--task", "dyck", "--nhid", "8", "--batch-size", "8", "--dyck-size", "16,8,8",
                     "--max-steps", "1", "--out", str(tmp_path / "dyck"), "--quiet"]) == 0
    assert analyze(tmp_path / "dyck" / "last.pt", tmp_path / "b") == 2
    assert "no analysis for a 'dyck'" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert analyze(tmp_path / "buffer" / "last.pt", tmp_path / "file") == 2
    assert "must be a directory" in capsys.readouterr().err
    assert cli.main(["analyze", str(tmp_path / "buffer" / "last.pt"), "--windows", "0"]) == 2
    assert "--windows must be >= 1, got 0" in capsys.readouterr().err
    assert analyze(tmp_path / "buffer" / "last.pt", tmp_path / "d", "--windows", "3") == 2
    assert "is a 'mlp-lm' checkpoint, whose analyses read no windows" in capsys.readouterr().err
    assert analyze(tmp_path / "dyck" / "last.pt", tmp_path / "d", "--only", "routing") == 2
    assert analyze(tmp_path / "buffer" / "last.pt", tmp_path / "d", "--only", "routing") == 2
    assert "--only routing: routing is not an analysis of this checkpoint; it has receptive_fields" in \
        capsys.readouterr().err.splitlines()[-1]

    def no_matplotlib():
        raise ImportError("tsrnn.lab.plot needs matplotlib: pip install matplotlib")

    monkeypatch.setattr(plot, "_matplotlib", no_matplotlib)
    assert analyze(tmp_path / "dyck" / "last.pt", tmp_path / "c") == 2
    assert "needs matplotlib" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()  # found before any work
