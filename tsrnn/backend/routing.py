"""The routing of one recurrent layer: the path record that runs it (``route``) and the run
itself (``run``), what ``tsrnn.functional`` and the modules call.

A call whose key ``MEMO`` holds takes the remembered record at once (no candidates, no
environment read); tracing and torch.func transforms always choose anew. Otherwise
``choice.choose`` lists the candidates, verifies and times them ("auto") and remembers the choice.
"""
from __future__ import annotations

from tsrnn import _validation as check
from tsrnn import precision
from tsrnn.backend import choice
from tsrnn.backend.registry import REGISTRY, Call
from tsrnn.ops import library
from tsrnn.ops.recurrence.layer import Inputs, Layer


def route(layer: Layer, inputs: Inputs, backend: str, traces: bool):
    """The record of the path that runs this layer; its ``run["recurrence"]`` runs it."""
    x, h0, states, packing = inputs.x, inputs.h0, inputs.states, inputs.packing
    grad = library.needs_grad(x, h0, *states, layer.w_ih, layer.w_hh, *(layer.torch_bias or ()), layer.bias,
                              *layer.params, layer.w_hr)
    steps = x.shape[0] if packing is None else packing.steps
    key = path = None
    if check.eager():
        # T as a power-of-two bucket, as it enters the tuning key, and the products' precision (a
        # choice verified with TF32 allowed is not one for exact products, nor the other way)
        device = x.device
        key = (layer.cell.name, device, x.dtype, steps.bit_length(), h0.shape[1], x.shape[-1], layer.w_hh.shape[1],
               layer.bias is None and layer.torch_bias is None, grad, traces, packing is None, layer.w_hr is None,
               precision.products(x.dtype, device))  # (Layer.has_bias spelled out: one call fewer a layer)
        path = choice.MEMO.get((backend, key))
    if path is None:
        path = REGISTRY[_choose(layer, inputs, backend, traces, grad, steps, key)]
    return path


def run(layer: Layer, inputs: Inputs, backend: str = "auto", traces: bool = False):
    """(out, (h_n, *states_n), traces) of one layer on the path ``route`` gives."""
    path = route(layer, inputs, backend, traces)
    return path.run["recurrence"](path, layer, inputs, traces)


def _choose(layer: Layer, inputs: Inputs, backend: str, traces: bool, grad: bool, steps: int, key) -> str:
    """``route``'s choice for a call ``MEMO`` does not hold (remembered under ``key`` unless None),
    with the run that "auto" times and verifies."""
    cell, x, h0, packing = layer.cell, inputs.x, inputs.h0, inputs.packing
    hidden = layer.w_hh.shape[1] if layer.w_hr is None else layer.w_hr.shape[1]
    call = Call("recurrence", x.device, x.dtype, (steps, h0.shape[1], x.shape[-1], hidden), cell.name,
                layer.has_bias, grad, traces, packing is not None, layer.w_hr is not None)
    names = ("x", *cell.initial_states, "w_ih", "w_hh", "bias", "w_hr", *cell.params)
    tensors = (x, h0, *inputs.states, layer.w_ih, layer.w_hh, layer.added_bias(), layer.w_hr, *layer.params)

    def timed(path, dtype=None):
        """The call on detached copies, cast to ``dtype`` if given (the step input too: data, no
        gradient), for the backend to time and verify: it joins no graph and fires no hooks.
        Returns the outputs and the copies that need gradients, by name (``choice.Run``)."""
        copies = [None if t is None else t.detach().to(dtype or t.dtype).requires_grad_(t.requires_grad)
                  for t in tensors]
        x, h0, *rest = copies
        count = len(inputs.states)
        states, (w_ih, w_hh, bias, w_hr), params = rest[:count], rest[count:count + 4], rest[count + 4:]
        steps = inputs.steps if inputs.steps is None or dtype is None else inputs.steps.to(dtype)
        record = REGISTRY[path]
        out, finals, _ = record.run["recurrence"](
            record, layer._replace(w_ih=w_ih, w_hh=w_hh, bias=bias, torch_bias=None, w_hr=w_hr, params=tuple(params)),
            Inputs(x, h0, tuple(states), steps, packing), traces)
        outputs = dict(zip(("out", *(f"{s}_n" for s in ("h", *cell.states))), (out, *finals)))
        return outputs, {name: t for name, t in zip(names, copies) if t is not None and t.requires_grad}

    return choice.choose(backend, call, timed, key)
