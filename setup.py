"""Builds tsrnn and its extensions: ``tsrnn._C`` (CPU kernels of torch.ops.tsrnn.*) and, with a
CUDA build of torch and nvcc, ``tsrnn._cuda`` (the tensor-core CUDA kernels).

``pip install .`` builds in an isolated environment against the torch version installed where
tsrnn goes (build_backend.py); ``pip install --no-build-isolation -e .`` against the torch already
in the environment, without a second download.

Both extensions are optional: one that cannot be built (no CUDA torch or no nvcc, or a compiler
error) is left out with one line saying why, and the install is the pure-PyTorch package for it
(``backend="auto"`` falls back to the reference loops with one warning naming the cause, which
``tsrnn/_built_with.py`` records with the torch version the extensions were built against).

Environment:
- TSRNN_CUDA=1 requires the CUDA extension (fails without nvcc or a CUDA torch, and on a compiler
  error), TSRNN_CUDA=0 skips it; unset, it is built when torch has CUDA and nvcc is found.
  TORCH_CUDA_ARCH_LIST picks the GPU architectures: by default the visible GPUs', else
  DEFAULT_CUDA_ARCHS.
- TSRNN_STRICT_BUILD=1 makes any extension's build failure an error.
- TSRNN_NO_EXTENSION=1 installs the pure-PyTorch package; ``backend="auto"`` then falls back to
  the reference loops with one warning.
"""
import functools
import glob
import os
import platform
import subprocess
import sys

from setuptools import find_packages, setup

from build_backend import cublas_include_dir

ROOT = os.path.dirname(os.path.abspath(__file__))
PACKAGES = find_packages(include=["tsrnn", "tsrnn.*"])
LIMITED_API = ("cp310", "-DPy_LIMITED_API=0x030A0000")  # the wheel's abi3 tag: requires-python's oldest
DEFAULT_CUDA_ARCHS = "8.0;9.0"  # A100, H100/H200: where no GPU is visible and TORCH_CUDA_ARCH_LIST is unset
BUILT_WITH = "tsrnn/_built_with.py"
NOT_BUILT = {}  # extension name -> why it is not built


def say(message: str) -> None:
    """One line of the build's output (pip shows it with -v, or when the build fails)."""
    print(f"tsrnn: {message}", file=sys.stderr, flush=True)


def write_built_with(torch_version: str | None, *roots: str) -> None:
    """tsrnn/_built_with.py under each root: the torch the extensions were built against, and why
    any of them was not built (tsrnn/ops/extensions.py reads it before loading them)."""
    text = ('"""Written by setup.py: the torch the compiled extensions were built against, and why any of\n'
            'them was not built."""\n'
            f"TORCH_VERSION = {torch_version!r}\nNOT_BUILT = {NOT_BUILT!r}\n")
    for root in roots:
        path = os.path.join(root, BUILT_WITH)
        if os.path.isdir(os.path.dirname(path)):
            with open(path, "w") as f:
                f.write(text)


def libmvec():
    """glibc's vector math library on x86-64 Linux (see csrc/recurrence/cpu/vector_math.h)."""
    if sys.platform.startswith("linux") and platform.machine() == "x86_64":
        return ["-lmvec"]
    return []


@functools.cache  # one compiler call for both extensions
def shared_cxx_runtime() -> tuple[str, ...]:
    """The shared C++ runtime as a link input on Linux: the compiler's libstdc++.so.6, named before
    the driver's own ``-lstdc++`` so that nothing is left for a static libstdc++ to supply.

    The lent GPU machines' toolchain (CXX=/opt/gcc/bin/g++, a wrapper script in front of GCC 13.3)
    linked libstdc++ statically into
    both extensions: each had its own copy of the C++ runtime, whose std::locale was never set up,
    and every error message that formats a number (c10::str, an ostringstream) crashed the process
    there. Empty where the compiler does not name the library (then the driver's default stands)."""
    if not sys.platform.startswith("linux"):
        return ()
    try:
        found = subprocess.run([os.environ.get("CXX", "c++"), "-print-file-name=libstdc++.so.6"],
                               capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ()
    return (found,) if os.path.isabs(found) and os.path.isfile(found) else ()


def cuda_extension():
    """The CUDA extension, or None where it is not wanted or cannot be built (see TSRNN_CUDA)."""
    import torch
    from torch.utils import cpp_extension

    wanted = os.environ.get("TSRNN_CUDA", "auto")
    if wanted not in ("0", "1", "auto"):
        raise SystemExit(f"TSRNN_CUDA must be 0, 1 or unset, got {wanted!r}")
    problem, cublas = None, None
    if torch.version.cuda is None:
        problem = f"torch {torch.__version__} is a CPU build"
    elif cpp_extension.CUDA_HOME is None:
        problem = "nvcc was not found (set CUDA_HOME)"
    else:
        cublas = cublas_include_dir(cpp_extension.CUDA_HOME)
        if cublas is None:
            problem = f"cuBLAS's headers (cublas_v2.h) are neither in {cpp_extension.CUDA_HOME}/include nor in an nvidia wheel"
    if wanted == "0":
        NOT_BUILT["tsrnn._cuda"] = "TSRNN_CUDA=0"
        return None
    if problem:
        if wanted == "1":
            raise SystemExit(f"TSRNN_CUDA=1 but {problem}")
        NOT_BUILT["tsrnn._cuda"] = problem
        say(f"not building the CUDA extension: {problem}")
        return None
    if not os.environ.get("TORCH_CUDA_ARCH_LIST") and not torch.cuda.is_available():
        os.environ["TORCH_CUDA_ARCH_LIST"] = DEFAULT_CUDA_ARCHS
        say(f"no GPU visible and TORCH_CUDA_ARCH_LIST unset: building the CUDA extension for {DEFAULT_CUDA_ARCHS}")
    return cpp_extension.CUDAExtension(
        "tsrnn._cuda",
        ["csrc/recurrence/cuda/binding.cpp", *sorted(glob.glob("csrc/recurrence/cuda/*.cu")),
         *sorted(glob.glob("csrc/gemm/cuda/*.cu"))],
        include_dirs=[os.path.join(ROOT, "csrc"), cublas],
        extra_compile_args={"cxx": ["-O3", "-g0", LIMITED_API[1]], "nvcc": ["-O3", "-std=c++17"]},
        extra_link_args=list(shared_cxx_runtime()),
        py_limited_api=True,
        optional=wanted != "1",
    )


def optional_build(base):
    """``base`` (torch's BuildExtension) where an optional extension that fails to build, in its
    own compile or in the checks before any (the compiler's ABI), is left out with one line saying
    why, recorded in tsrnn/_built_with.py (TSRNN_STRICT_BUILD=1: an error)."""

    class OptionalBuild(base):
        def run(self):
            import torch

            super().run()
            in_place = self.inplace or getattr(self, "editable_mode", False)  # editable: the source tree's copy
            write_built_with(torch.__version__, self.build_lib, *([ROOT] if in_place else []))

        def build_extensions(self):
            try:
                super().build_extensions()
            except Exception as exc:  # before any extension: no usable compiler
                self._leave_out([e for e in self.extensions if e.name not in NOT_BUILT], exc)

        def build_extension(self, ext):
            try:
                super().build_extension(ext)
            except Exception as exc:  # a compiler or linker error, a missing tool
                self._leave_out([ext], exc)

        def _leave_out(self, exts, exc):
            if os.environ.get("TSRNN_STRICT_BUILD") == "1" or not all(e.optional for e in exts):
                raise exc
            lines = [line for line in str(exc).splitlines() if line.strip()]
            for ext in exts:
                NOT_BUILT[ext.name] = f"its build failed ({type(exc).__name__}: {lines[0] if lines else ''})"
                say(f"{ext.name} is not built: {NOT_BUILT[ext.name]}; installing without it "
                    "(TSRNN_STRICT_BUILD=1 makes this an error)")

    return OptionalBuild


def extensions():
    if os.environ.get("TSRNN_NO_EXTENSION") == "1":  # recorded in the tree, so no earlier build's record ships
        NOT_BUILT.update({name: "TSRNN_NO_EXTENSION=1" for name in ("tsrnn._C", "tsrnn._cuda")})
        write_built_with(None, ROOT)
        return [], {}
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    folders = ("csrc", "csrc/recurrence/cpu", "csrc/linear_scan", "csrc/gemm")  # the module, each op's CPU code, the GEMMs
    sources = sorted(path for folder in folders for path in glob.glob(f"{folder}/*.cpp"))
    ext = CppExtension(
        "tsrnn._C",
        sources,
        include_dirs=[os.path.join(ROOT, "csrc")],
        extra_compile_args=["-O3", "-fopenmp", "-fno-math-errno", "-g0", LIMITED_API[1]],
        extra_link_args=["-fopenmp", *libmvec(), *shared_cxx_runtime()],
        py_limited_api=True,
        optional=True,
    )
    cuda = cuda_extension()
    build = optional_build(BuildExtension).with_options(use_ninja=True)
    return [ext] + ([cuda] if cuda else []), {"build_ext": build}


ext_modules, cmdclass = extensions()
setup(
    packages=PACKAGES,
    package_data={"tsrnn.lab.data": ["*.txt"]},
    ext_modules=ext_modules,
    cmdclass=cmdclass,
    options={"bdist_wheel": {"py_limited_api": LIMITED_API[0]}} if ext_modules else {},
)
