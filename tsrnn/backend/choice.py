"""Which path runs a call: the candidates of a requested backend, the choice among them (verified
by ``tsrnn.backend.trust``, timed by ``tsrnn.backend.timing``) and the memory of each call key's
choice (``MEMO``). docs/backends.md states the rules; in short, a requested backend (``backend=``,
or ``TSRNN_BACKEND`` for ``"auto"``) maps to candidates in order of preference:

- ``"auto"``: CPU, LSTM: onednn, cpu; pLSTM and scan: cpu. CUDA: cudnn (LSTM), cuda_cluster,
  cuda_grid, else triton_step (``Path.fallback``); scan: triton_scan. Other devices: reference,
  with one warning. Under torch.export: torch's LSTM kernel for a static length, else reference;
  under torch.func transforms: reference.
- ``"native"``: the device's compiled kernels (on CUDA, Triton with one warning where they refuse
  the call); a missing extension raises.
- ``"triton"``: triton_step (triton_scan for the scan).
- ``"reference"``, or a path's name: that path alone (ValueError saying why it cannot serve).

"auto" verifies its candidates once per kernel regime (``TSRNN_VERIFY``) and times them once per
shape class (``Call.key()``; ``TSRNN_AUTOTUNE``), keeping both on disk (``tsrnn.backend.cache``).
Tracing, capture and the Triton interpreter take the key's earlier choice, else the first
candidate. The variables are read when a key is first seen; a bad value raises a ValueError that
names it. ``forget()`` drops ``MEMO`` so a changed variable reaches keys already seen.
"""
from __future__ import annotations

from typing import Hashable, Mapping, Sequence

import torch

from tsrnn import _validation as check
from tsrnn.backend import cache, registry, timing, trust
from tsrnn.backend.registry import (BACKENDS, PATHS, REGISTRY, TRANSFORMS, Call, Path, Run, _recorded, warn_once,
                                    why_not)

_tuned: dict[Hashable, str] = {}  # (call key, candidates) -> the measured choice
_reused: dict[str, str] = {}  # Call.recorded_key() -> the path a recorded run used (reuse_choices)
# (requested backend, memo key) -> the chosen path's record: what a warm call of a known key runs.
MEMO: dict[Hashable, Path] = {}


def _family(requested: str, call: Call) -> list[str]:
    """The candidate paths of a requested backend, before filtering, in order of preference."""
    if requested in PATHS[call.op]:
        return [requested]
    paths = [REGISTRY[name] for name in PATHS[call.op]]
    if requested == "triton":
        return [p.name for p in paths if p.family == "triton"]
    on_device = [p for p in paths if p.devices is not None and call.device.type in p.devices]
    if requested == "native":
        return [p.name for p in on_device if p.family == "native"]
    return [p.name for p in sorted(on_device, key=lambda p: p.kind != "torch_lstm")]  # auto (a stable sort)


def _effective(requested: str) -> str:
    """The request after TSRNN_BACKEND: the variable's value (default "auto") for "auto"."""
    if requested != "auto":
        return requested
    return check.environment("TSRNN_BACKEND", BACKENDS, "auto")


def candidates(requested: str, call: Call) -> list[str]:
    """The paths that would serve ``call`` for ``requested`` ("auto" reads TSRNN_BACKEND), in
    order of preference; raises where the request cannot be met."""
    check.choice("backend", requested, BACKENDS + tuple(p for p in PATHS[call.op] if p != "reference"))
    given, requested = requested, _effective(requested)
    if requested != "reference" and check.under_transforms():
        if requested == "auto":
            return ["reference"]
        named = f"backend={requested!r}" if given == requested else f"TSRNN_BACKEND={requested!r}"
        raise ValueError(f"{named} cannot run this call: {TRANSFORMS}")
    if requested == "auto" and torch.compiler.is_exporting():
        return _exportable(call)
    family = _family(requested, call)
    serving = [path for path in family if why_not(path, call) is None]
    if requested == "auto":  # the older paths only where nothing else serves
        serving = [path for path in serving if not REGISTRY[path].fallback] or serving
    if serving:
        return serving
    device = call.device.type
    if requested in PATHS[call.op]:
        raise ValueError(f"backend={requested!r} cannot run this call: {why_not(requested, call)}")
    if requested == "triton":
        raise RuntimeError(f"backend='triton' cannot run this call: {why_not(family[-1], call)}")
    if requested == "native":
        if device == "cpu" and registry.LOAD_ERROR is not None:
            raise RuntimeError(f"backend='native' needs the compiled extension tsrnn._C, which did not load "
                               f"({registry.LOAD_ERROR}); reinstall with `pip install --no-build-isolation -e .`")
        if device == "cpu":  # loaded, but its kernel refuses this call
            raise ValueError(f"backend='native' cannot run this call: {_reasons(family, call)}")
        if device != "cuda":
            raise RuntimeError(f"backend='native' has no kernel for {device} tensors in this build; "
                               "use backend='auto' or 'reference'")
        if not family:
            raise RuntimeError(f"backend='native' has no CUDA kernel for {call.op}; use backend='auto' or 'triton'")
        if registry.CUDA_LOAD_ERROR is not None:
            raise RuntimeError(f"backend='native' on CUDA tensors needs the extension tsrnn._cuda, which did not load "
                               f"({registry.CUDA_LOAD_ERROR}); build it with `TSRNN_CUDA=1 pip install --no-build-isolation -e .`")
        fallback = [p for p in _family("triton", call) if why_not(p, call) is None] or ["reference"]
        warn_once(f"tsrnn: the CUDA kernels cannot run this call ({_reasons(family, call)}); using {fallback[0]}")
        return fallback
    if device == "cpu" and registry.LOAD_ERROR is not None:
        warn_once(f"tsrnn: compiled extension tsrnn._C did not load ({registry.LOAD_ERROR}); falling back to the reference loops")
    elif device == "cpu":
        warn_once(f"tsrnn: no CPU kernel can run this {call.op} call ({_reasons(family, call)}); using the reference loop")
    elif device == "cuda":
        warn_once(f"tsrnn: no fused kernel for this {call.op} call on CUDA (triton is not installed); "
                  "using the reference loop")
    else:
        warn_once(f"tsrnn: no fused kernel for {device} tensors yet; using the reference loop")
    return ["reference"]


def _reasons(paths: list[str], call: Call) -> str:
    """Why each of ``paths`` cannot serve ``call``: "path: reason; ..."."""
    return "; ".join(f"{path}: {why_not(path, call)}" for path in paths)


def _exportable(call: Call) -> list[str]:
    """What "auto" runs while torch.export traces: torch's LSTM kernel for an LSTM of a static
    length (torch.export specializes its length: an ONNX LSTM node for that T), else the reference
    path, whose time loop exports as one scan operator (an ONNX Scan, for any T)."""
    if not isinstance(call.shape[0], torch.SymInt):
        lstm = [p for p in _family("auto", call) if REGISTRY[p].kind == "torch_lstm" and why_not(p, call) is None]
        if lstm:
            return lstm[:1]
    return ["reference"]


def choose(requested: str, call: Call, run: Run | None = None, memo_key: Hashable | None = None) -> str:
    """The path that runs ``call``. With ``run``, "auto" verifies and times its candidates (the
    module docstring). With ``memo_key``, a choice that later calls would repeat (one made where runs can be measured,
    or without ``run``) is remembered in ``MEMO`` under (requested, memo_key)."""
    path, final = _choice(requested, call, run)
    if final and memo_key is not None:
        MEMO[requested, memo_key] = REGISTRY[path]
    return path


def _choice(requested: str, call: Call, run: Run | None) -> tuple[str, bool]:
    """``choose``'s path, and whether a later call of the key would choose it again."""
    paths = candidates(requested, call)
    if run is None or torch.jit.is_tracing() or torch.compiler.is_exporting():
        return paths[0], run is None and not check.tracing()
    measurable = timing.can_measure(call.device, paths)
    auto = _effective(requested) == "auto"
    tune = (auto or len(paths) > 1) and check.switch("TSRNN_AUTOTUNE")
    verify = check.environment("TSRNN_VERIFY", trust.VERIFY, "1")
    if auto and verify != "0":
        paths = trust.verified(paths, call, run, measurable, per_shape=verify == "always")
    if len(paths) == 1:
        return paths[0], measurable
    key = (call.key(), tuple(paths))
    if key not in _tuned:
        reused = _reused.get(call.recorded_key())
        if reused is not None and reused not in paths:
            warn_once(f"tsrnn: the recorded choice {reused!r} for {call.cell or call.op} {call.shape} cannot serve "
                      f"this call here (candidates: {', '.join(paths)}); choosing again, so results may differ "
                      "from the recorded run's in the last bits")
        if reused in paths:
            _tuned[key] = reused
        elif torch.are_deterministic_algorithms_enabled():
            _tuned[key] = paths[0]
        elif not measurable or not tune:
            return paths[0], measurable
        else:
            _tuned[key] = _measured(paths, call, run)
    return _tuned[key], measurable


def _measured(paths: Sequence[str], call: Call, run: Run) -> str:
    """The fastest of ``paths`` for the call's class: the disk cache's choice where it holds one
    among them, else timed (``timing.fastest``) and written to the cache."""
    key = repr((_recorded(call.key()), tuple(paths)))
    stored = cache.lookup(call.device, "choices", key)
    if stored in paths:
        return stored
    fastest = timing.fastest(paths, call, run)
    cache.record(call.device, "choices", key, fastest)
    stored = cache.lookup(call.device, "choices", key)  # the first writer's, where processes timed at once
    return stored if stored in paths else fastest


def reuse_choices(choices: Mapping[str, str]) -> None:
    """Make "auto" take, for each key of ``choices`` (``tuned_choices()`` of another run: a
    checkpoint records them), the path that run used instead of measuring again, where that path
    is still a candidate here; a resumed run then computes with the same kernels, bit for bit."""
    for key, path in choices.items():
        if not isinstance(key, str) or path not in REGISTRY:
            raise ValueError(f"recorded backend choices map call keys to path names, got {key!r}: {path!r}")
    _reused.update(choices)
    forget()


def forget() -> None:
    """Drops the memory of each call key's choice (``MEMO``): the next call of every key works out
    its candidates again, reading TSRNN_BACKEND, TSRNN_VERIFY and TSRNN_AUTOTUNE anew (the
    measured choices and verdicts are kept)."""
    MEMO.clear()


def tuned_choices() -> dict[str, str]:
    """The choices so far, measured, taken by rule under deterministic algorithms, or reused, as
    {``Call.recorded_key()``: path}, the last for a key whose candidates changed (recorded by
    training checkpoints and bench/gpu_report.py; see ``reuse_choices``)."""
    return {_recorded(key): path for (key, _), path in _tuned.items()}
