"""The dispatcher: which path runs each call. ``registry`` describes the paths (``Path``) and a
call (``Call``); ``choice`` picks a path for a call (candidates, the memory of each call key's
choice), ``trust`` verifies a candidate before "auto" uses it, ``timing`` times the candidates;
``verification`` and ``tolerance`` say when a path agrees with the reference; ``cache`` keeps
verdicts and choices on disk. This package hands their public names on."""
from tsrnn.backend.choice import MEMO, candidates, choose, forget, reuse_choices, tuned_choices
from tsrnn.backend.registry import (BACKENDS, CUDA_LOAD_ERROR, LOAD_ERROR, PATHS, REGISTRY, TRANSFORMS, Call, Path,
                                    native_available, op, paths_on, triton_available, why_not)
from tsrnn.backend.timing import TUNE_MARGIN, TUNE_REPEATS
from tsrnn.backend.trust import trusted_path, verdicts

__all__ = ["BACKENDS", "CUDA_LOAD_ERROR", "LOAD_ERROR", "MEMO", "PATHS", "REGISTRY", "TRANSFORMS", "TUNE_MARGIN",
           "TUNE_REPEATS", "Call", "Path", "candidates", "choose", "forget", "native_available", "op", "paths_on",
           "reuse_choices", "triton_available", "trusted_path", "tuned_choices", "verdicts", "why_not"]
