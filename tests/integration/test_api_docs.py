"""The API reference (docs/build_api.py) builds from the docstrings with every warning an error,
and holds the public API's pages; a type annotation that does not resolve fails the build."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("pdoc")
ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("build_api", ROOT / "docs" / "build_api.py")
build_api = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build_api)


def test_the_reference_builds_and_documents_the_public_api(tmp_path):
    build_api.build(tmp_path)
    pages = {path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*.html")}
    assert {"index.html", "tsrnn.html", "tsrnn/functional.html", "tsrnn/modules.html", "tsrnn/memory/tilt.html",
            "tsrnn/memory/timescales.html", "tsrnn/memory/contexts.html", "tsrnn/lab/loading.html",
            "tsrnn/precision.html", "tsrnn/testing.html"} <= pages
    assert not any(page.startswith(("tsrnn/ops", "tsrnn/lab/training")) for page in pages)
    modules = (tmp_path / "tsrnn" / "modules.html").read_text()
    for anchor in ("LSTM", "PowerLawLSTM", "LSTM.from_torch", "LSTM.to_torch", "PowerLawLSTM.trace"):
        assert f'id="{anchor}"' in modules, anchor
    assert 'id="load"' in (tmp_path / "tsrnn" / "lab" / "loading.html").read_text()


def test_a_warning_fails_the_build(tmp_path):
    (tmp_path / "broken_annotation.py").write_text(
        '"""A module whose annotation names nothing."""\nfrom __future__ import annotations\n\n\n'
        'def f(x: NoSuchType) -> int:\n    """Doc."""\n    return 0\n')
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(Warning, match="NoSuchType"):
            build_api.build(tmp_path / "out", ["broken_annotation"])
    finally:
        sys.path.remove(str(tmp_path))
