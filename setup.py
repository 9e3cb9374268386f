"""Builds tsrnn and its C++ extension ``tsrnn._C`` (CPU kernels, registered as torch.ops.tsrnn.*).

Install against the torch already in the environment (an isolated build would pull another torch):

    pip install --no-build-isolation -e .

If the extension fails to build, set TSRNN_NO_EXTENSION=1 to install the pure-PyTorch package;
``backend="auto"`` then falls back to the reference loops with one warning.
"""
import glob
import os
import platform
import sys

from setuptools import find_packages, setup

ROOT = os.path.dirname(os.path.abspath(__file__))
PACKAGES = find_packages(include=["tsrnn", "tsrnn.*"]) + ["tsrnn.kernels"]
PACKAGE_DIR = {"tsrnn.kernels": "kernels"}


def libmvec():
    """glibc's vector math library on x86-64 Linux (see csrc/cpu/vector_math.h)."""
    if sys.platform.startswith("linux") and platform.machine() == "x86_64":
        return ["-lmvec"]
    return []


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
    return [ext], {"build_ext": BuildExtension.with_options(use_ninja=True)}


ext_modules, cmdclass = extensions()
setup(
    packages=PACKAGES,
    package_dir=PACKAGE_DIR,
    package_data={"tsrnn.data": ["*.txt"]},
    ext_modules=ext_modules,
    cmdclass=cmdclass,
    options={"bdist_wheel": {"py_limited_api": "cp39"}} if ext_modules else {},
)
