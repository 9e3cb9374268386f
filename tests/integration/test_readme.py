"""The README's example and the docs' examples run as written, and the README stays a front door:
at most 12 KB, its example on the first screen, every relative link of README.md, ARCHITECTURE.md
and docs/ pointing at a file that exists."""
import pathlib
import re

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
USAGE = ROOT / "docs" / "usage.md"
BACKENDS = ROOT / "docs" / "backends.md"
MIGRATING = ROOT / "docs" / "migrating.md"
README_MAX_BYTES = 12 * 1024


def _blocks(path):
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)
    assert blocks, f"{path.name} has no python example"
    return blocks


def _run(path, blocks, namespace):
    for block in blocks:
        exec(compile(block, str(path.relative_to(ROOT)), "exec"), namespace)
    return namespace


def test_readme_example_runs():
    (block,) = _blocks(README)  # the one example of the front page
    ns = _run(README, [block], {})
    assert ns["out"].shape == (70, 20, 256) and ns["h_n"].shape == ns["c_n"].shape == (2, 20, 256)
    # the multi-timescale LSTM: its i/f biases are the timescales' (b_f = -log(expm1(1/T)), b_i = -b_f)
    timescales = ns["timescales"]
    assert timescales.shape == (256,) and bool((timescales[:-1] > timescales[1:]).all())
    assert ns["mts_out"].shape == (70, 20, 256)
    b_f = -torch.log(torch.expm1(1 / timescales))
    bias = ns["mts"].gate_biases(0).detach().double()
    torch.testing.assert_close(bias[256:512], b_f, atol=1e-5, rtol=0)
    torch.testing.assert_close(bias[:256], -b_f, atol=1e-5, rtol=0)
    # the pLSTM with Δt and lengths: (h, c, a) per layer, a in float32; the state carried on
    assert ns["p_out"].shape == (70, 20, 128)
    assert [t.shape for t in ns["state"]] == [(1, 20, 128)] * 3 and ns["a"].dtype == torch.float32
    out, (h, _, _) = ns["plstm"](ns["x"], dt=ns["dt"], lengths=ns["lengths"])
    for row, length in enumerate(ns["lengths"].tolist()):  # zero past each row's end; h_n its last step's
        assert bool((out[length:, row] == 0).all())
        torch.testing.assert_close(h[0, row], out[length - 1, row])
    assert ns["fields"].shape == (70, 20, 30, 16) and ns["fields"].dtype == torch.float32


def test_readme_example_is_on_the_first_screen_and_the_readme_stays_small():
    text = README.read_text()
    assert len(README.read_bytes()) <= README_MAX_BYTES
    assert text[:text.index("```python")].count("\n") < 30
    for name in ("tsrnn.LSTM(", "timescales=", "inverse_gamma_quantiles", "tsrnn.PowerLawLSTM(", "dt=", "lengths=",
                 "tsrnn.TILT("):
        assert name in _blocks(README)[0], name


def test_usage_example_runs(tmp_path, monkeypatch):
    from tsrnn.lab import cli

    monkeypatch.chdir(tmp_path)  # the example saves a PNG and loads runs/lm: a main job cut to 2 steps
    assert cli.main(["train", "--emsize", "8", "--nhid", "16,8", "--bptt", "10", "--batch-size", "4", "--max-steps",
                     "2", "--out", "runs/lm", "--quiet"]) == 0
    ns = _run(USAGE, _blocks(USAGE), {})
    assert ns["score"].tokens[:5] == ["the", "king", "is", "dead", "<eos>"] and ns["score"].ppl > 1
    assert ns["y"].shape == (70, 20, 256)
    assert ns["fit"].alpha > 0
    assert (tmp_path / "fields.png").stat().st_size > 0


def test_lengths_and_autocast_examples_run():
    ns = _run(BACKENDS, _blocks(BACKENDS), {})
    assert ns["logits"].shape == (32, 2)
    assert isinstance(ns["packed_out"], torch.nn.utils.rnn.PackedSequence)
    assert ns["out"].dtype == torch.bfloat16 and ns["c_n"].dtype == torch.bfloat16


def test_migration_examples_run():
    ns = _run(MIGRATING, _blocks(MIGRATING), {})
    assert ns["out"].shape == (8, 50, 64) and ns["h_n"].shape == ns["c_n"].shape == (2, 8, 64)
    assert ns["result"].unexpected_keys == ["bias_fixed_l0"] and not ns["result"].missing_keys
    assert type(ns["back"]) is torch.nn.LSTM
    torch.testing.assert_close(ns["trained"].timescales(0), ns["timescales"], rtol=1e-5, atol=0)  # float32 biases
    assert ns["h"].shape == (35, 20, 32)
    assert all(rnn.weight_hh_l0.grad is not None for rnn in ns["rnns"])


def test_every_relative_link_of_the_readme_and_the_docs_exists():
    pages = [README, ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a web address or an anchor in the page
            path = (page.parent / target.split("#")[0]).resolve()
            assert path.exists(), f"{page.relative_to(ROOT)} links {target}, which does not exist"
