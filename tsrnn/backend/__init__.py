"""The dispatcher: which path runs each call. ``registry`` describes the paths (``Path``) and a
call (``Call``); ``choice`` picks a path for a call (candidates, verification, autotuning, the
memory of each call key's choice); ``verification`` and ``tolerance`` say when a path agrees with
the reference. This package hands their public names on."""
from tsrnn.backend.choice import (TUNE_MARGIN, TUNE_REPEATS, MEMO, candidates, choose, forget, reuse_choices,
                                  trusted_path, tuned_choices, verdicts)
from tsrnn.backend.registry import (BACKENDS, CUDA_LOAD_ERROR, LOAD_ERROR, PATHS, REGISTRY, TRANSFORMS, Call, Path,
                                    native_available, op, paths_on, triton_available, why_not)

__all__ = ["BACKENDS", "CUDA_LOAD_ERROR", "LOAD_ERROR", "MEMO", "PATHS", "REGISTRY", "TRANSFORMS", "TUNE_MARGIN",
           "TUNE_REPEATS", "Call", "Path", "candidates", "choose", "forget", "native_available", "op", "paths_on",
           "reuse_choices", "triton_available", "trusted_path", "tuned_choices", "verdicts", "why_not"]
