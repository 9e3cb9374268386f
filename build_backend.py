"""tsrnn's PEP 517 build backend: setuptools', building against the torch it will run with.

The compiled extensions link against libtorch's C++ API, whose ABI changes between torch
releases, so they must be built against the torch release that will import them. An isolated
build (plain ``pip install .``) gets a fresh build environment, where setuptools alone would
install the newest torch: here the build asks for ``torch==<the release installed where tsrnn is
being installed>``. pip runs this backend with the target environment's interpreter, whose
``sysconfig`` paths still name that environment's site-packages. Without torch there, the build
takes the newest torch, as the install's own dependency will.

The requirement names the public release (2.13.0 for 2.13.0+cpu): a local variant such as +cpu
lives on PyTorch's own index, which the build environment may not see, and variants of one
release share the C++ API tsrnn._C uses (tsrnn/ops/extensions.py compares releases the same way).
"""
from __future__ import annotations

import importlib.metadata
import sysconfig

from setuptools.build_meta import *  # noqa: F401,F403  (the hooks this module does not change)


def _torch_requirement() -> str:
    """``torch==X`` for the release of the torch installed in the target environment, else ``torch``."""
    paths = sorted({sysconfig.get_paths()[key] for key in ("purelib", "platlib")})
    for dist in importlib.metadata.distributions(path=paths):
        if (dist.metadata["Name"] or "").lower() == "torch":
            return f"torch=={dist.version.split('+')[0]}"
    return "torch"


# The extra requirements of each build: torch only. setuptools' own hooks would run setup.py to ask
# for setup_requires, and setup.py imports torch, which is not in the build environment yet.
def get_requires_for_build_wheel(config_settings=None):
    return [_torch_requirement()]


def get_requires_for_build_editable(config_settings=None):
    return [_torch_requirement()]


def get_requires_for_build_sdist(config_settings=None):
    return [_torch_requirement()]


def cublas_include_dir(cuda_home: str | None) -> str | None:
    """The folder holding cuBLAS's <cublas_v2.h>, which the CUDA extension's tensor-core GEMMs
    include (csrc/gemm/cuda/tensor_core_gemm.h): the CUDA toolkit's include folder, else that of the
    nvidia cuBLAS wheel a CUDA build of torch installs beside it (nvidia/cu13/include,
    nvidia/cublas/include); None where neither has it. setup.py and the GPU probe's own build
    (bench/probe/kernels.py) ask here."""
    import importlib.util
    import os

    folders = [os.path.join(cuda_home, "include")] if cuda_home else []
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        folders += sorted(os.path.join(root, name, "include") for name in os.listdir(root))
    return next((folder for folder in folders if os.path.isfile(os.path.join(folder, "cublas_v2.h"))), None)
