"""What the install promises, checked without installing (CI runs the isolated ``pip install .``,
a build with a failing compiler and the strict switch, .ci/run): the build backend asks for the
torch it will run with, an extension built against another torch or not built at all is never
imported and says why, the wheel's abi3 tag is requires-python's oldest Python, and the declared
torch range is the one CI tests."""
import ast
import importlib
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tsrnn.ops import extensions

pytestmark = pytest.mark.slow  # builds and installs the package

ROOT = Path(__file__).resolve().parents[2]
tomllib = pytest.importorskip("tomllib")


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_build_asks_for_the_running_torch(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    backend = importlib.import_module("build_backend")
    release = torch.__version__.split("+")[0]
    assert backend.get_requires_for_build_wheel() == [f"torch=={release}"]
    assert backend.get_requires_for_build_editable() == [f"torch=={release}"]
    build = _pyproject()["build-system"]
    assert build["build-backend"] == "build_backend" and not any(r.startswith("torch") for r in build["requires"])


def test_an_extension_built_against_another_torch_is_not_imported(monkeypatch):
    monkeypatch.setattr(extensions, "_built_with", lambda: ("1.0.0", {}))
    monkeypatch.setattr(importlib, "import_module", lambda name: pytest.fail(f"imported {name}"))
    error = extensions._load("tsrnn._C")
    assert f"built against torch 1.0.0, but torch {torch.__version__} is running" in error
    assert "pip install --no-build-isolation ." in error


def test_another_variant_of_the_same_release_is_imported(monkeypatch):
    imported = []
    monkeypatch.setattr(extensions, "_built_with", lambda: (torch.__version__.split("+")[0] + "+cu130", {}))
    monkeypatch.setattr(importlib, "import_module", imported.append)
    assert extensions._load("tsrnn._C") is None and imported == ["tsrnn._C"]


def test_a_recorded_build_failure_is_the_load_error(monkeypatch):
    monkeypatch.setattr(extensions, "_built_with", lambda: (torch.__version__, {"tsrnn._C": "its build failed (x)"}))
    monkeypatch.setattr(importlib, "import_module", lambda name: pytest.fail(f"imported {name}"))
    assert extensions._load("tsrnn._C") == "tsrnn._C was not built: its build failed (x)"


def test_the_abi3_tag_is_the_oldest_python_supported():
    oldest = re.fullmatch(r">=3\.(\d+)", _pyproject()["project"]["requires-python"]).group(1)
    setup = (ROOT / "setup.py").read_text()
    tag, macro = re.search(r'LIMITED_API = \("cp3(\d+)", "-DPy_LIMITED_API=0x03(\w\w)0000"\)', setup).groups()
    assert tag == oldest and int(macro, 16) == int(oldest)
    assert "0x0309" not in setup


def test_the_torch_range_is_the_one_ci_tests():
    (torch_requirement,) = [d for d in _pyproject()["project"]["dependencies"] if d.startswith("torch")]
    low, high = re.fullmatch(r"torch>=(\d+\.\d+),<(\d+\.\d+)", torch_requirement).groups()
    tested = sorted({tuple(int(p) for p in v.split(".")[:2])
                     for v in re.findall(r"torch==(\d+\.\d+\.\d+)", (ROOT / ".ci" / "run").read_text())})
    assert len(tested) >= 2, "CI tests the lowest and the newest torch of the range"
    assert tested[0] == tuple(int(p) for p in low.split("."))
    major, minor = tested[-1]
    assert (major, minor + 1) == tuple(int(p) for p in high.split("."))


def cxx_runtime_problem(library: str) -> str | None:
    """Why ``library`` (a compiled extension) does not use the process's shared C++ runtime, or
    None: it must need libstdc++.so.6. A copy linked in statically has a std::locale of its own
    that is never set up, and every error message that formats a number crashed the process (the
    lent H200 machines' toolchain built such copies, which needed no libstdc++.so.6)."""
    dynamic = subprocess.run(["readelf", "--wide", "--dynamic", library], capture_output=True, text=True,
                             check=True).stdout
    return None if "Shared library: [libstdc++.so.6]" in dynamic else "it does not need libstdc++.so.6"


def _built_extensions():
    for name in ("tsrnn._C", "tsrnn._cuda"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin and spec.origin.endswith(".so"):
            yield name, spec.origin


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("readelf") is None,
                    reason="reads ELF files with readelf (Linux, binutils)")
def test_the_extensions_use_the_shared_cxx_runtime(tmp_path):
    built = list(_built_extensions())
    if not built:
        pytest.skip("no compiled extension is built")
    for name, library in built:
        assert cxx_runtime_problem(library) is None, f"{name} ({library}): {cxx_runtime_problem(library)}"
    source = tmp_path / "number.cpp"  # the check fails on the build the H200's toolchain made
    source.write_text("#include <sstream>\n#include <string>\n"
                      "std::string number(int n) { std::ostringstream s; s << n; return s.str(); }\n")
    static = tmp_path / "static.so"
    if subprocess.run(["c++", "-shared", "-fPIC", str(source), "-static-libstdc++", "-o", str(static)]).returncode:
        pytest.skip("c++ cannot link libstdc++ statically here")
    assert "does not need libstdc++.so.6" in cxx_runtime_problem(str(static))


def test_the_sdist_holds_what_a_build_needs_and_twine_accepts_it(tmp_path):
    """``python -m build --sdist`` of the tracked files: the backend, the license, every C++/CUDA
    source and header, py.typed, the version from tsrnn/_version.py; no build record or binary.
    (CI builds the wheel from such an sdist, installs it into a fresh venv and imports it.)"""
    pytest.importorskip("build")
    twine = pytest.importorskip("twine")
    if not (ROOT / ".git").exists():
        pytest.skip("needs the source checkout")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    tree = tmp_path / "tree"
    for name in tracked:
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tree / name)
    (tree / "tsrnn" / "_built_with.py").write_text("TORCH_VERSION = None\nNOT_BUILT = {}\n")  # an editable build's
    subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(tmp_path / "dist"),
                    str(tree)], check=True, capture_output=True)
    from tsrnn._version import VERSION

    (sdist,) = (tmp_path / "dist").iterdir()
    assert sdist.name == f"tsrnn-{VERSION}.tar.gz"
    import tarfile

    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    sources = {name for name in tracked if name.startswith("csrc/")}
    assert sources and sources <= names
    assert {"build_backend.py", "LICENSE", "CHANGELOG.md", "README.md", "tsrnn/py.typed", "setup.py",
            "pyproject.toml", "tsrnn/lab/data/tiny_shakespeare.txt"} <= names
    assert "tsrnn/_built_with.py" not in names and not [n for n in names if n.endswith((".so", ".pyc"))]
    result = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(sdist)], capture_output=True,
                            text=True)
    assert result.returncode == 0 and "PASSED" in result.stdout, (twine.__version__, result.stdout, result.stderr)


def _dev_only_packages() -> set[str]:
    """The packages of the dev extra that the test extra leaves out (onnx's, through tsrnn[test,onnx])."""
    extras = _pyproject()["project"]["optional-dependencies"]

    def packages(extra):
        found = set()
        for requirement in extras[extra]:
            name, _, included = re.fullmatch(r"([\w-]+)(\[([\w,]+)\])?.*", requirement).groups()
            found |= set().union(*map(packages, included.split(","))) if name == "tsrnn" else {name}
        return found

    return packages("dev") - packages("test")


def _tests_skipping_without(packages: set[str]) -> set[str]:
    """The test files (an importorskip at module level) and tests (in a test function) that skip
    when one of ``packages`` is missing, as pytest node ids relative to the repository."""
    found = set()
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        tree, file_id = ast.parse(path.read_text()), path.relative_to(ROOT).as_posix()
        definitions = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
        scopes = [(file_id, [node for node in tree.body if node not in definitions])]
        scopes += [(f"{file_id}::{node.name}", node.body) for node in definitions if node.name.startswith("test_")]
        for node_id, body in scopes:
            calls = [node for statement in body for node in ast.walk(statement) if isinstance(node, ast.Call)
                     and ast.unparse(node.func) == "pytest.importorskip" and isinstance(node.args[0], ast.Constant)]
            if any(call.args[0].value in packages for call in calls):
                found.add(node_id)
    return found


def test_ci_runs_every_test_that_skips_without_the_dev_extra():
    """The test extra holds what the README's test command needs; a test needing a package of the dev
    extra only (mypy, pdoc, build, twine, TensorBoard, ONNX) skips without it, and .ci/run runs
    exactly those tests after installing the dev extra."""
    dev_only = _dev_only_packages()
    assert dev_only == {"build", "twine", "mypy", "pdoc", "tensorboard", "onnx", "onnxscript", "onnxruntime"}
    ci = (ROOT / ".ci" / "run").read_text()
    step = ci[ci.index('pip install --no-build-isolation -e ".[dev]"'):]
    step = step[:step.index("\n\n")]
    assert set(re.findall(r"tests/[\w/]+\.py(?:::\w+)?", step)) == _tests_skipping_without(dev_only)
