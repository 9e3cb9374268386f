"""Checkpoints in other layouts, converted to tsrnn modules.

The pLSTM authors' copy-task code (seed 002's public implementation) keeps one cell with
``weight_ih`` (3H, I), ``weight_hh`` (3H, H), one ``bias`` (3H,) and, when p is learned, ``p``
(H,) holding the logit of the exponent (the cell uses σ(p)); a fixed p is a plain attribute, not
in the state dict. Its gate rows are ordered (r, o, g); tsrnn's coupled pLSTM orders them
(r, g, o) and splits the bias into bias_ih + bias_hh (bias_hh = 0 here).

The authors' cell also resets the reference time to t - ε rather than t: in age form
a_t = (1 - r)(a_{t-1} + 1) + r ε and f = ((a_t + ε) / (a_t + 1))^p, where tsrnn follows the
paper (S9): a_t = (1 - r)(a_{t-1} + 1), f = ((a_t + 1) / ((1 - r)(a_{t-1} + 1) + ε))^{-p}. The
two agree to O(ε) where a_t >> ε and differ by up to a factor 2^p in f where r -> 1, so a
converted model reproduces the authors' outputs closely, not bit for bit.
"""
from __future__ import annotations

import torch

from tsrnn import _validation as check
from tsrnn.modules.plstm import PowerLawLSTM

AUTHORS_PREFIX = "lstm.layer_aux.layer1."  # the cell's path inside the authors' PowerLawLSTM model
_AUTHORS_TO_TSRNN_GATES = (0, 2, 1)  # tsrnn gate g takes the authors' gate block _[g]: (r, o, g) -> (r, g, o)


def plstm_from_authors(state_dict: dict, prefix: str = AUTHORS_PREFIX, p: float | torch.Tensor | None = None,
                       **module_kwargs) -> PowerLawLSTM:
    """A one-layer coupled ``tsrnn.PowerLawLSTM`` holding the weights of the authors' pLSTM cell.

    ``state_dict``: the authors' model or cell state dict; ``prefix``: the cell's key prefix
    ("" for a bare cell). ``p``: the fixed decay exponent(s) in (0, 1) when the checkpoint did not
    learn p (its state dict has no ``p``); the module then keeps p fixed (``learn_p=False``).
    ``module_kwargs`` go to ``PowerLawLSTM`` (eps, batch_first, backend, ...).
    """
    names = {name: prefix + name for name in ("weight_ih", "weight_hh", "bias")}
    missing = [key for key in names.values() if key not in state_dict]
    if missing:
        raise KeyError(f"the authors' pLSTM cell needs {missing} in the state dict (prefix {prefix!r}); "
                       f"keys present: {sorted(state_dict)[:8]}")
    w_ih, w_hh, bias = (state_dict[key] for key in names.values())
    check.tensor("weight_hh", w_hh, 2)
    hidden = w_hh.shape[1]
    check.shape("weight_hh", w_hh, (3 * hidden, hidden))
    check.tensor("weight_ih", w_ih, 2)
    check.shape("weight_ih", w_ih, (3 * hidden, w_ih.shape[1]))
    check.tensor("bias", bias, 1)
    check.shape("bias", bias, (3 * hidden,))
    p_logit = state_dict.get(prefix + "p")
    if p_logit is not None and p is not None:
        raise ValueError(f"p was given, but the checkpoint learned its own ({prefix}p); leave p=None")
    if p_logit is None:
        if p is None:
            raise ValueError(f"the checkpoint has no {prefix}p (p was fixed in the authors' run): pass its value as p")
        p = torch.as_tensor(p, dtype=torch.float64).expand(hidden)
        check.finite("p", p)
        if not bool(((p > 0) & (p < 1)).all()):
            raise ValueError("p must lie in (0, 1)")
        p_logit = torch.logit(p)
    else:
        check.tensor("p", p_logit, 1)
        check.shape("p", p_logit, (hidden,))

    def regroup(t: torch.Tensor) -> torch.Tensor:
        blocks = t.reshape(3, hidden, *t.shape[1:])
        return blocks[list(_AUTHORS_TO_TSRNN_GATES)].reshape(t.shape)

    module = PowerLawLSTM(w_ih.shape[1], hidden, input_gate="coupled", learn_p=p is None,
                          dtype=w_hh.dtype, **module_kwargs)
    with torch.no_grad():
        module.weight_ih_l0.copy_(regroup(w_ih))
        module.weight_hh_l0.copy_(regroup(w_hh))
        module.bias_ih_l0.copy_(regroup(bias))
        module.bias_hh_l0.zero_()
        module.p_logit_l0.copy_(p_logit)
    return module
