"""The README's example runs as written."""
import pathlib
import re

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
