"""The README's example runs as written."""
import pathlib
import re

import torch

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the example saves a PNG
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    namespace = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    assert namespace["y"].shape == (70, 20, 256)
    assert namespace["fit"].alpha > 0
    assert (tmp_path / "fields.png").stat().st_size > 0


def test_readme_lengths_and_autocast_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    namespace = {}
    exec(compile(blocks[0].split("# Multi-timescale")[0], "README.md", "exec"), namespace)  # imports and x
    for block in blocks[1:]:
        exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["logits"].shape == (32, 2)
    assert isinstance(namespace["packed_out"], torch.nn.utils.rnn.PackedSequence)
    assert namespace["out"].dtype == torch.bfloat16 and namespace["c_n"].dtype == torch.bfloat16
