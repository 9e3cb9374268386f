"""Which of "auto"'s candidates may be used: each verified once against the trusted path before
it is trusted (``tsrnn.backend.choice`` says when verification runs).

``verified`` verifies a candidate once per kernel regime (the op, cell, dtype, device, products
precision, gradients, traces, packing, bias and the path's ``Path.regime`` of the call: which of
its code runs it; not per shape), the only candidate too: on the call's own inputs, the
candidate's outputs and, when the call needs gradients, the gradients of a fixed pseudo-random
loss over every output with respect to every input that requires grad, against the *trusted*
path run in float64 on the same values (``trusted_path``: the device's torch-LSTM path where it
serves the call, else the reference loops; these two are not verified), within
``tsrnn.backend.tolerance``'s row for the call's dtype or, where larger,
``tsrnn.backend.verification.SLACK`` times the trusted path's own error in that dtype (run only
when a result is beyond its row). A candidate that disagrees is dropped for that regime, one that
raises for that shape only (its failure may be the shape's), with one warning naming it, the
output or gradient, the error and the bound; if none is left, the trusted path runs (warned
too). ``per_shape`` (TSRNN_VERIFY=always, ``VERIFY``) verifies every new shape (exact sizes),
those verdicts kept in memory only. Per-regime verdicts are also kept on disk
(``tsrnn.backend.cache``); a verdict from disk counts as one made here. ``verdicts()`` lists the
verdicts so far.
"""
from __future__ import annotations

import functools
from typing import Hashable, Sequence

import torch

from tsrnn import precision
from tsrnn.backend import cache, verification
from tsrnn.backend.registry import PATHS, REGISTRY, Call, Run, warn_once, why_not

VERIFY = ("0", "1", "always")  # TSRNN_VERIFY's values: off, once per regime (the default), once per shape

_verdicts: dict[Hashable, str | None] = {}  # _verdict_key -> None (it agrees) or why "auto" drops it


def trusted_path(call: Call) -> str:
    """The path "auto"'s candidates are verified against, run in float64: the device's torch-LSTM
    path (onednn, cudnn) where it serves ``call``, else the reference loops."""
    torch_lstm = [p for p in PATHS[call.op] if REGISTRY[p].kind == "torch_lstm" and why_not(p, call) is None]
    return (torch_lstm or ["reference"])[0]


def _verdict_key(call: Call, path: str, per_shape: bool) -> tuple:
    """What a verdict of ``path`` holds for: per regime, (path, op, device type and index, dtype,
    cell, products precision, gradients, traces, packing, bias, the path's ``regime`` of the call);
    ``per_shape`` (TSRNN_VERIFY=always), the call key and the call's exact sizes."""
    if per_shape:
        return ("shape", call.key(), call.shape, path)
    record = REGISTRY[path]
    return (path, call.op, call.device.type, call.device.index, call.dtype, call.cell,
            precision.products(call.dtype, call.device), call.grad, call.traces, call.packed, call.bias,
            () if record.regime is None else record.regime(call))


def verified(paths: Sequence[str], call: Call, run: Run, measurable: bool, per_shape: bool) -> list[str]:
    """``paths`` less those found to disagree with the trusted path, verifying those without a
    verdict yet where ``measurable`` (the trusted kinds, reference and torch_lstm, are not
    verified): once per regime (``_verdict_key``), or, ``per_shape``, once per shape. A path that
    raised while being verified is dropped for this shape only; the trusted path, with a warning,
    if none is left."""
    checked = [p for p in paths if REGISTRY[p].kind not in ("reference", "torch_lstm")]
    shapes = {p: _verdict_key(call, p, True) for p in checked}
    keys = shapes if per_shape else {p: _verdict_key(call, p, False) for p in checked}
    if not per_shape:
        for path in checked:
            if keys[path] not in _verdicts:
                stored = cache.lookup(call.device, "verdicts", _disk_key(keys[path]))
                if stored is not cache.MISSING:
                    _judged(keys[path], stored)

    def verdict(path: str):
        return _verdicts.get(keys[path], _verdicts.get(shapes[path], cache.MISSING))

    pending = [p for p in checked if verdict(p) is cache.MISSING]
    if pending and measurable:
        for path, (found, raised) in _verify(pending, call, run).items():
            _judged(shapes[path] if raised else keys[path], found)
            if not (per_shape or raised):
                cache.record(call.device, "verdicts", _disk_key(keys[path]), found)
    kept = [p for p in paths if p not in keys or verdict(p) in (None, cache.MISSING)]
    if kept:
        return kept
    trusted = trusted_path(call)
    warn_once(f"tsrnn: no candidate of 'auto' agrees with {trusted} for this shape; using {trusted}")
    return [trusted]


def _judged(key: tuple, verdict: str | None) -> None:
    """Keeps a verdict (warning once where it drops the path)."""
    _verdicts[key] = verdict
    if verdict:
        warn_once(f"{verdict}; 'auto' does not use it for such calls")


def _disk_key(key: tuple) -> str:
    """A per-regime verdict key as the disk cache writes it: without the device index (the file is
    the device's), as text."""
    return repr(key[:3] + key[4:])


def _verify(paths: Sequence[str], call: Call, run: Run) -> dict[str, tuple[str | None, bool]]:
    """Each path's verdict, from its run and the trusted path's on the call's inputs: None (it
    agrees), or why "auto" drops it; and whether the path raised."""
    trusted = trusted_path(call)
    try:
        expected = verification.results(run, trusted, call.grad, torch.float64)
    except Exception as exc:
        raise RuntimeError(f"tsrnn: the trusted path {trusted} failed in float64 while 'auto' verified its "
                           f"candidates ({type(exc).__name__}: {exc}); name a backend, or set TSRNN_VERIFY=0") from exc
    own = functools.cache(lambda: verification.results(run, trusted, call.grad))  # in the call's dtype
    verdicts = {}
    for path in paths:
        try:
            wrong = verification.disagreement(verification.results(run, path, call.grad), expected, call.dtype, own,
                                              precision.products(call.dtype, call.device))
            verdicts[path] = None if wrong is None else (
                f"tsrnn: the {path} path disagrees with {trusted} (run in float64 on the same inputs) for "
                f"{call.cell or call.op} {call.dtype} {call.shape}{' with gradients' if call.grad else ''}: "
                f"{wrong}"), False
        except Exception as exc:  # noqa: BLE001  (a broken path must not break "auto"; it is reported)
            verdicts[path] = f"tsrnn: the {path} path failed while being verified ({type(exc).__name__}: {exc})", True
    return verdicts


def verdicts() -> dict[str, str]:
    """The verifications so far, as {repr(what the verdict holds for, ``_verdict_key``): "agrees"
    or why "auto" drops it} (recorded by bench/gpu_report.py)."""
    return {repr(key): verdict or "agrees" for key, verdict in _verdicts.items()}
