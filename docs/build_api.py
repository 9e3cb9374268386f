"""Build tsrnn's API reference from its docstrings with pdoc, every warning an error.

    python docs/build_api.py [OUT]          # default: site/api; open OUT/index.html

The reference covers the public API: ``tsrnn`` (LSTM, PowerLawLSTM, load, ``tsrnn.functional``,
``tsrnn.backend``), ``tsrnn.modules``, ``tsrnn.memory`` (timescales, TILT, contexts, averaging),
``tsrnn.precision``, ``tsrnn.testing`` and ``tsrnn.lab.loading``; not the kernels' internals
(``tsrnn.ops``) nor the rest of the research application (``tsrnn.lab``). A warning (a module that
does not import, a type annotation that does not resolve, a repeated module) fails the build.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

# pdoc module specifications: "!pattern" leaves the matching submodules out.
MODULES = ["tsrnn", "!tsrnn.lab", "!tsrnn.ops", "!tsrnn._.*", "!tsrnn.reference", "tsrnn.modules", "tsrnn.memory",
           "tsrnn.precision", "tsrnn.testing", "tsrnn.lab.loading"]


def build(out: Path, modules: list[str] = MODULES) -> None:
    """Write the reference's HTML pages under ``out``; any warning raises."""
    import pdoc

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pdoc.pdoc(*modules, output_directory=out)


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "site/api")
    build(target)
    print(f"API reference in {target}/index.html")
