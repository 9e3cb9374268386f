"""Builds tsrnn and its extensions: ``tsrnn._C`` (CPU kernels of torch.ops.tsrnn.*) and, with a
CUDA build of torch and nvcc, ``tsrnn._cuda`` (the persistent CUDA kernels).

Install against the torch already in the environment (an isolated build would pull another torch):

    pip install --no-build-isolation -e .

Environment:
- TSRNN_CUDA=1 requires the CUDA extension (fails without nvcc or a CUDA torch), TSRNN_CUDA=0
  skips it; unset, it is built when torch has CUDA and nvcc is found. TORCH_CUDA_ARCH_LIST picks
  the GPU architectures (torch's default: the visible GPUs, else a list of common ones).
- TSRNN_NO_EXTENSION=1 installs the pure-PyTorch package; ``backend="auto"`` then falls back to
  the reference loops with one warning.
"""
import glob
import os
import platform
import sys

from setuptools import find_packages, setup

ROOT = os.path.dirname(os.path.abspath(__file__))
PACKAGES = find_packages(include=["tsrnn", "tsrnn.*"])


def libmvec():
    """glibc's vector math library on x86-64 Linux (see csrc/cpu/vector_math.h)."""
    if sys.platform.startswith("linux") and platform.machine() == "x86_64":
        return ["-lmvec"]
    return []


def cuda_extension():
    """The CUDA extension, or None where it is not wanted or cannot be built (see TSRNN_CUDA)."""
    import torch
    from torch.utils import cpp_extension

    wanted = os.environ.get("TSRNN_CUDA", "auto")
    if wanted not in ("0", "1", "auto"):
        raise SystemExit(f"TSRNN_CUDA must be 0, 1 or unset, got {wanted!r}")
    problem = None
    if torch.version.cuda is None:
        problem = f"torch {torch.__version__} is a CPU build"
    elif cpp_extension.CUDA_HOME is None:
        problem = "nvcc was not found (set CUDA_HOME)"
    if wanted == "0" or (wanted == "auto" and problem):
        return None
    if problem:
        raise SystemExit(f"TSRNN_CUDA=1 but {problem}")
    return cpp_extension.CUDAExtension(
        "tsrnn._cuda",
        ["csrc/cuda/binding.cpp", "csrc/cuda/recurrence.cu"],
        include_dirs=[os.path.join(ROOT, "csrc")],
        extra_compile_args={"cxx": ["-O3", "-g0", "-DPy_LIMITED_API=0x03090000"], "nvcc": ["-O3", "-std=c++17"]},
        py_limited_api=True,
    )


def extensions():
    if os.environ.get("TSRNN_NO_EXTENSION") == "1":
        return [], {}
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    sources = sorted(glob.glob("csrc/*.cpp") + glob.glob("csrc/cpu/*.cpp"))
    ext = CppExtension(
        "tsrnn._C",
        sources,
        include_dirs=[os.path.join(ROOT, "csrc")],
        extra_compile_args=["-O3", "-fopenmp", "-fno-math-errno", "-g0", "-DPy_LIMITED_API=0x03090000"],
        extra_link_args=["-fopenmp"] + libmvec(),
        py_limited_api=True,
    )
    cuda = cuda_extension()
    return [ext] + ([cuda] if cuda else []), {"build_ext": BuildExtension.with_options(use_ninja=True)}


ext_modules, cmdclass = extensions()
setup(
    packages=PACKAGES,
    package_data={"tsrnn.data": ["*.txt"]},
    ext_modules=ext_modules,
    cmdclass=cmdclass,
    options={"bdist_wheel": {"py_limited_api": "cp39"}} if ext_modules else {},
)
