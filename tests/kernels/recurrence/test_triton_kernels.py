"""What is particular to the Triton recurrence (tsrnn/ops/recurrence/triton_step.py);
its results against the reference are the table of tests/kernels/recurrence/test_paths.py. Without a GPU they run
on CPU tensors through the Triton interpreter (TRITON_INTERPRET=1, conftest.py); with one, on CUDA."""
import pytest
import torch
from conftest import op_inputs

from tsrnn import backend, testing
from tsrnn.ops.recurrence import cells
from tsrnn.backend import tolerance

pytestmark = pytest.mark.skipif(not backend.triton_available(), reason="triton is not installed")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _drivers():
    """(forward, backward) with the signatures of the recurrence operators."""
    from tsrnn.ops.recurrence import triton_step

    return triton_step.recurrence_forward, triton_step.recurrence_backward


def test_forward_without_save():
    forward, _ = _drivers()
    args = op_inputs("plstm_coupled", 3, 2, 4, 5, dt=True, device=DEVICE)
    with_save = forward(*args, True)
    h, state_n, state, saved = forward(*args, False)
    assert saved.numel() == 0
    for got, want in zip((h, state_n, state), with_save):
        assert torch.equal(got, want)


def test_bf16_tensors_are_refused():
    """The functional layer runs bf16 layers in float32; the kernels take float32 or float64 only
    (states stored in bf16 would round c at every step)."""
    forward, _ = _drivers()
    args = op_inputs("lstm", 2, 1, 2, 3, dt=False, dtype=torch.bfloat16, device=DEVICE)
    with pytest.raises(TypeError, match=r"take float32 or float64, got torch.bfloat16"):
        forward(*args, True)


def _backward_inputs(cell, T, B, I, H, dt):
    """Positional arguments of recurrence_backward, without grad_h and grad_state_n: (w_hh, h0, state0,
    h_all, state_all, saved, params, steps, constants), from the per-step Triton forward, on DEVICE."""
    args = op_inputs(cell, T, B, I, H, dt=dt, device=DEVICE)
    h_all, _, state_all, saved = backend.op("triton_step", "recurrence_forward")(*args, True)
    return (*args[2:5], h_all, state_all, saved, *args[5:])


def _no_launch(monkeypatch):
    """Replace every Triton kernel: a launch would fail with a TypeError, not the expected error."""
    from tsrnn.ops.recurrence import triton_step

    for name in ("_forward_step", "_backward_step"):
        monkeypatch.setattr(triton_step, name, None)


# The Triton drivers check their arguments as the compiled ops do (tsrnn/ops/recurrence/checks.py),
# before any launch. id: (cell, argument index in (cell, xg, w_hh, h0, state0, params, steps,
# constants), its replacement, message after "tsrnn: "); T, B, I, H = 3, 2, 4, 5.
BAD_FORWARD = {
    "unknown-cell": ("lstm", 0, lambda v: "gru", r"unknown cell 'gru'"),
    "xg-2d": ("lstm", 1, lambda v: v[0], r"xg must have 3 dimensions, got \[2, 20\]"),
    "xg-columns": ("lstm", 1, lambda v: v[..., :-1], r"xg must be \[T, B, 20\], got \[3, 2, 19\]"),
    "xg-zero-steps": ("lstm", 1, lambda v: v[:0], r"empty input, xg \[0, 2, 20\]"),
    "xg-zero-rows": ("lstm", 1, lambda v: v[:, :0], r"empty input, xg \[3, 0, 20\]"),
    "w_hh-rows": ("plstm_coupled", 2, lambda v: torch.cat([v, v[:5]]), r"w_hh must be \[15, 5\], got \[20, 5\]"),
    "w_hh-device": ("lstm", 2, lambda v: v.to("meta"), rf"w_hh is on meta, expected {DEVICE}"),
    "h0-batch": ("lstm", 3, lambda v: v[:1], r"h0 must be \[2, 5\], got \[1, 5\]"),
    "h0-dtype": ("lstm", 3, lambda v: v.double(), r"h0 has dtype torch.float64, expected torch.float32"),
    "state0-count": ("plstm_separate", 4, lambda v: v[:1], r"state0 must be \[2, 2, 5\], got \[1, 2, 5\]"),
    "params-missing": ("plstm_coupled", 5, lambda v: None, r"params are required for the cell plstm_coupled"),
    "params-for-lstm": ("lstm", 5, lambda v: torch.ones(1, 5, device=DEVICE), r"params are not used for the cell lstm"),
    "params-length": ("plstm_coupled", 5, lambda v: v[:, :-1], r"params must be \[1, 5\], got \[1, 4\]"),
    "params-rows": ("plstm_coupled", 5, lambda v: torch.cat([v, v]), r"params must be \[1, 5\], got \[2, 5\]"),
    "steps-transposed": ("plstm_separate", 6, lambda v: v.t(), r"steps must be \[3, 2\], got \[2, 3\]"),
    "steps-for-lstm": ("lstm", 6, lambda v: torch.ones(3, 2, device=DEVICE),
                    r"the cell lstm takes no step input \(steps\)"),
    "constants-missing": ("plstm_coupled", 7, lambda v: [], r"the cell plstm_coupled takes 1 constants, got 0"),
    "constants-for-lstm": ("lstm", 7, lambda v: [1e-3], r"the cell lstm takes 0 constants, got 1"),
}


@pytest.mark.parametrize("case", BAD_FORWARD)
def test_wrong_forward_arguments_are_refused_before_running(monkeypatch, case):
    cell, index, replace, match = BAD_FORWARD[case]
    args = list(op_inputs(cell, 3, 2, 4, 5, dt=cell != "lstm", device=DEVICE))
    args[index] = replace(args[index])
    _no_launch(monkeypatch)
    with pytest.raises(RuntimeError, match=r"^tsrnn: " + match):
        _drivers()[0](*args, True)


BAD_BACKWARD = {  # id: (cell, argument index in recurrence_backward's, replacement, message after "tsrnn: ")
    "h_all-2d": ("lstm", 6, lambda v: v[0], r"h_all must be \[T, B, H\], got \[2, 5\]"),
    "w_hh-dtype": ("lstm", 3, lambda v: v.double(), r"w_hh has dtype torch.float64, expected torch.float32"),
    "state_all-steps": ("plstm_coupled", 7, lambda v: v[1:], r"state_all must be \[T, S, B, H\], got \[2, 2, 2, 5\]"),
    "saved-without-save": ("plstm_coupled", 8, lambda v: v.new_empty(0),
                           r"saved must be \[T, B, 20\], got \[0\] \(was the forward run with save=false\?\)"),
    "grad_h-steps": ("lstm", 1, lambda v: torch.ones(2, 2, 5, device=DEVICE),
                     r"grad_h must be \[3, 2, 5\], got \[2, 2, 5\]"),
    "grad_state_n-every-step": ("plstm_separate", 2, lambda v: torch.ones(3, 2, 2, 5, device=DEVICE),
                                r"grad_state_n must have 3 dimensions, got \[3, 2, 2, 5\]"),
    "grad_state_n-count": ("plstm_separate", 2, lambda v: torch.ones(1, 2, 5, device=DEVICE),
                           r"grad_state_n must be \[2, 2, 5\], got \[1, 2, 5\]"),
    "params-missing": ("plstm_separate", 9, lambda v: None, r"params are required for the cell plstm_separate"),
    "constants-missing": ("plstm_separate", 11, lambda v: [], r"the cell plstm_separate takes 1 constants, got 0"),
}


@pytest.mark.parametrize("case", BAD_BACKWARD)
def test_wrong_backward_arguments_are_refused_before_running(monkeypatch, case):
    cell, index, replace, match = BAD_BACKWARD[case]
    args = [cell, None, None, *_backward_inputs(cell, 3, 2, 4, 5, dt=cell != "lstm")]
    args[index] = replace(args[index])
    _no_launch(monkeypatch)
    with pytest.raises(RuntimeError, match=r"^tsrnn: " + match):
        _drivers()[1](*args)


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_tensors_triton_cannot_read_are_refused_before_running(monkeypatch, device):
    """Meta tensors, and CPU tensors without the interpreter (as on a GPU machine), get the drivers'
    clear error (checks.triton_device), not one from inside Triton's launcher."""
    forward_args = op_inputs("plstm_coupled", 3, 2, 4, 5, dt=True, device=device)
    backward_args = [t.to(device) if isinstance(t, torch.Tensor) else t
                     for t in ("plstm_coupled", None, None, *_backward_inputs("plstm_coupled", 3, 2, 4, 5, dt=True))]
    forward, backward = _drivers()  # imported first: @triton.jit reads TRITON_INTERPRET when the module loads
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    _no_launch(monkeypatch)
    match = rf"^tsrnn: Triton runs on CUDA tensors .*, got {device} tensors"
    for call in (lambda: forward(*forward_args, True), lambda: backward(*backward_args)):
        with pytest.raises(RuntimeError, match=match):
            call()


@pytest.mark.parametrize("path", ["triton_step", "cpu"])
@pytest.mark.parametrize("case", ["xg-columns", "state0-count", "params-missing", "steps-transposed"])
def test_the_fake_kernel_refuses_what_the_ops_refuse(path, case):
    """The fake kernels run the same check on shapes only: torch.compile refuses a wrong call when
    tracing, with the message of the kernels (the Triton op's on DEVICE, the compiled op's on CPU)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    if path == "cpu" and not backend.native_available():
        pytest.skip(f"tsrnn._C not loaded: {backend.LOAD_ERROR}")
    cell, index, replace, match = BAD_FORWARD[case]
    args = list(op_inputs(cell, 3, 2, 4, 5, dt=cell != "lstm", device=DEVICE if path == "triton_step" else "cpu"))
    args[index] = replace(args[index])
    with pytest.raises(RuntimeError, match=r"^tsrnn: " + match):
        backend.op(path, "recurrence_forward")(*args, True)
    with FakeTensorMode(allow_non_fake_inputs=True), pytest.raises(RuntimeError, match=r"^tsrnn: " + match):
        backend.op(path, "recurrence_forward")(*args, True)


# Packed sequences (batch_sizes, torch's PackedSequence layout): id: (B, batch_sizes). The last two
# have more than 16 rows (a second block of rows at the smallest BLOCK_B), which ends before the
# first does or runs no step at all.
PACKED = {
    "equal-lengths": (3, [3, 3, 3]),
    "one-long-row": (3, [3, 1, 1, 1]),
    "rows-of-no-step": (4, [2, 2, 1]),
    "one-step": (3, [3]),
    "one-row": (1, [1, 1, 1]),
    "second-block-ends-first": (20, [17, 17, 5, 2]),
    "second-block-idle": (20, [14, 3]),
}


def _packed_inputs(cell, B, sizes, dtype):
    """recurrence_forward's arguments (without save) for a random layer in the packed layout, and
    batch_sizes: xg [N, G*H] and steps [N], the rows b < sizes[t] of each padded step."""
    T = len(sizes)
    cell, xg, w_hh, h0, state0, params, steps, constants = op_inputs(
        cell, T, B, 3, 5, dt=cells.get(cell).step_input is not None, dtype=dtype, seed=T * 7 + B)
    rows = torch.cat([t * B + torch.arange(s) for t, s in enumerate(sizes)])
    steps = None if steps is None else steps.reshape(T * B)[rows].to(DEVICE)
    xg = xg.reshape(T * B, -1)[rows]
    return ((cell, *(v.to(DEVICE) for v in (xg, w_hh, h0, state0)), None if params is None else params.to(DEVICE),
             steps, constants), torch.tensor(sizes, dtype=torch.int64))


def _run_packed(forward, args, batch_sizes, weights):
    """h_all, state_n and the gradients of xg, w_hh, h0, state0 (and params) of a loss weighting h_all
    and state_n by ``weights`` (None: the loss does not use that output), through the operator
    ``forward`` (its autograd formula)."""
    cell, *tensors, steps, constants = args
    inputs = [None if t is None else t.detach().clone().requires_grad_() for t in tensors]
    outputs = forward(cell, *inputs, steps, constants, True, batch_sizes)[:2]
    loss = sum((out * w.to(out)).sum() for out, w in zip(outputs, weights) if w is not None)
    return outputs, torch.autograd.grad(loss, [t for t in inputs if t is not None], allow_unused=True)


def _packed_matches_the_cpu_operator(cell, dtype, B, sizes, uses=(True, True)):
    """The Triton operator against the compiled CPU one, on a random layer of B rows and
    batch_sizes ``sizes``, with a loss over h_all and state_n (as ``uses`` says)."""
    if not backend.native_available():
        pytest.skip(f"tsrnn._C not loaded: {backend.LOAD_ERROR}")
    args, batch_sizes = _packed_inputs(cell, B, sizes, dtype)
    g = torch.Generator().manual_seed(len(sizes) + B)
    S, N, H = cells.get(cell).num_states, sum(sizes), args[2].shape[1]
    weights = [torch.randn(shape, generator=g, dtype=torch.float64) if used else None
               for shape, used in zip(((N, H), (S, B, H)), uses)]
    got = _run_packed(backend.op("triton_step", "recurrence_forward"), args, batch_sizes, weights)
    cpu_args = tuple(t.cpu() if isinstance(t, torch.Tensor) else t for t in args)
    want = _run_packed(torch.ops.tsrnn.recurrence_forward, cpu_args, batch_sizes, weights)
    names = ["grad_xg", "grad_w_hh", "grad_h0", "grad_state0"] + (["grad_params"] if cells.get(cell).params else [])
    for tables, outputs, expected, what in ((tolerance.TOLERANCE, got[0], want[0], ["h_all", "state_n"]),
                                            (tolerance.GRAD_TOLERANCE, got[1], want[1], names)):
        for name, actual, wanted in zip(what, outputs, expected):
            assert (actual is None) == (wanted is None), name
            err, bound = (0.0, 0.0) if actual is None else tolerance.error(actual, wanted, tables[dtype])
            assert err <= bound, f"{name}: max error {err:.3e} > {bound:.3e}"


@pytest.mark.parametrize("case", PACKED)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("cell", list(cells.CELLS))
def test_packed_sequences_match_the_cpu_operator(cell, dtype, case):
    """batch_sizes through each Triton operator (forward and its autograd backward) against the
    compiled CPU operator, which gradcheck verifies: h_all [N, H], state_n (each row's states after
    its last step; state0 for a row of no step) and every gradient of a random loss."""
    _packed_matches_the_cpu_operator(cell, dtype, *PACKED[case])


@pytest.mark.parametrize("uses", [(True, False), (False, True)], ids=["h_all-only", "state_n-only"])
@pytest.mark.parametrize("cell", list(cells.CELLS))
def test_packed_backward_without_grad_h_or_grad_state_n(cell, uses):
    """A loss over one output: the backward gets None for the other (grad_state_n None: the rows
    start from dL/dstate = 0; grad_h None: dh comes from the recurrence only)."""
    _packed_matches_the_cpu_operator(cell, torch.float64, *PACKED["second-block-ends-first"],
                                     uses=uses)


# Wrong batch_sizes values (read on the host: the checks of tsrnn/ops/recurrence/checks.py's packed_offsets,
# the compiled operator's messages); B = 3 and N = 4 packed rows. id: (batch_sizes, message after "tsrnn: ").
BAD_BATCH_SIZES = {
    "zero": ([3, 0], r"batch_sizes must be in \[1, B=3\], got 0"),
    "above-B": ([4], r"batch_sizes must be in \[1, B=3\], got 4"),
    "increasing": ([1, 3], r"batch_sizes must be non-increasing \(the batch sorted by length, longest first\)"),
    "sum": ([3, 2], r"the packed tensors have 4 rows, batch_sizes sums to 5"),
}


@pytest.mark.parametrize("run", ["triton_step", "cpu"])
@pytest.mark.parametrize("case", BAD_BATCH_SIZES)
def test_wrong_batch_sizes_are_refused_before_running(monkeypatch, run, case):
    """The Triton drivers, none of whose kernels may launch, and ("cpu") the compiled CPU operator
    on CPU tensors, which says the same."""
    if run == "cpu" and not backend.native_available():
        pytest.skip(f"tsrnn._C not loaded: {backend.LOAD_ERROR}")
    sizes, match = BAD_BATCH_SIZES[case]
    args, _ = _packed_inputs("plstm_coupled", 3, [3, 1], torch.float32)
    batch_sizes = torch.tensor(sizes, dtype=torch.int64)
    xg = args[1]
    h_all, state_all, saved = xg.new_zeros(4, 5), xg.new_zeros(len(sizes), 2, 3, 5), xg.new_zeros(4, 20)
    backward_args = ("plstm_coupled", None, None, *args[2:5], h_all, state_all, saved, *args[5:], batch_sizes)
    if run == "cpu":
        forward, backward = torch.ops.tsrnn.recurrence_forward, torch.ops.tsrnn.recurrence_backward
        args, backward_args = (tuple(t.cpu() if isinstance(t, torch.Tensor) else t for t in a)
                               for a in (args, backward_args))
    else:
        forward, backward = _drivers()
        _no_launch(monkeypatch)
    for call in (lambda: forward(*args, True, batch_sizes), lambda: backward(*backward_args)):
        with pytest.raises(RuntimeError, match=r"^tsrnn: " + match):
            call()


# The plug-in (cells_triton's docstring): a cell is its Cell record, its forward and backward
# Triton functions and one line of CELLS_TRITON. A toy cell of the smallest sizes the kernels take
# (G = 2, S = 1, K = 2, no parameter, step input or constant), registered for one test, runs
# through the unchanged kernels against autograd through its torch step.
def _leaky_step(z, states, params, delta, constants):
    """f, g = σ(z_f), tanh(z_g),  c = f c' + (1 - f) g,  h = tanh(c)."""
    z_f, z_g = z.chunk(2, dim=-1)
    f, g = torch.sigmoid(z_f), torch.tanh(z_g)
    c = f * states[0] + (1 - f) * g
    return torch.tanh(c), (c,), {"f": f}


if backend.triton_available():  # module level: the interpreter looks for triton.language in the globals
    import triton
    import triton.language as tl  # noqa: F401

    from tsrnn.ops.recurrence.cells_triton import sigmoid, tanh

    @triton.jit
    def leaky_forward(z0, z1, z2, z3, s0, s1, p0, dt, k0):
        f, g = sigmoid(z0), tanh(z1)
        c = f * s0 + (1.0 - f) * g
        return tanh(c), c, s1, f, g, g, g, g

    @triton.jit
    def leaky_backward(dh, ds0, ds1, act0, act1, act2, act3, act4, sp0, sp1, s0, s1, p0, dt, k0):
        f, g, h = act0, act1, tanh(s0)
        dc = ds0 + dh * (1.0 - h * h)
        return dc * (sp0 - g) * f * (1.0 - f), dc * (1.0 - f) * (1.0 - g * g), dh, dh, dc * f, ds1, 0.0


def test_a_new_cell_is_its_two_functions_and_one_dispatch_line(monkeypatch):
    from tsrnn.ops.recurrence import cells_triton
    from tsrnn.ops.recurrence.cells import Cell

    cell = Cell("leaky", gates=("f", "g"), states=("c",), saved=("f", "g"), step=_leaky_step)
    monkeypatch.setitem(cells.CELLS, cell.name, cell)
    monkeypatch.setitem(cells_triton.CELLS_TRITON, cell.name, cells_triton.TritonCell(leaky_forward, leaky_backward))
    T, B, H = 4, 3, 5
    g = torch.Generator().manual_seed(3)
    xg, w_hh, h0, state0 = (torch.randn(*shape, generator=g, dtype=torch.float64)
                            for shape in ((T, B, 2 * H), (2 * H, H), (B, H), (1, B, H)))
    forward, backward = _drivers()
    h_all, state_n, state_all, saved = forward("leaky", *(t.to(DEVICE) for t in (xg, w_hh, h0, state0)), None, None,
                                               [], True)
    grad_h, grad_state_n = torch.randn(T, B, H, generator=g, dtype=torch.float64), torch.randn(1, B, H, generator=g,
                                                                                                 dtype=torch.float64)
    grads = backward("leaky", grad_h.to(DEVICE), grad_state_n.to(DEVICE), w_hh.to(DEVICE), h0.to(DEVICE),
                     state0.to(DEVICE), h_all, state_all, saved, None, None, [])
    inputs = [t.clone().requires_grad_() for t in (xg, w_hh, h0, state0)]
    h, (c,), outs, fs = inputs[2], inputs[3].unbind(0), [], []
    for t in range(T):
        z = inputs[0][t] + h @ inputs[1].T
        h, (c,), values = _leaky_step(z, (c,), (), 1.0, ())
        outs.append(h)
        fs.append(values["f"])
    want_h = torch.stack(outs)
    want = torch.autograd.grad((want_h * grad_h).sum() + (c * grad_state_n[0]).sum(), inputs)
    assert saved.shape == (T, B, 2 * H) and grads[4].numel() == 0
    torch.testing.assert_close(h_all.cpu(), want_h.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(state_n.cpu(), c.detach().unsqueeze(0), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(saved.cpu().view(T, B, 2, H)[:, :, 0], torch.stack(fs).detach(), rtol=1e-12, atol=1e-12)
    for name, got, expected in zip(("grad_xg", "grad_w_hh", "grad_h0", "grad_state0"), grads, want):
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-10, atol=1e-10, msg=name)


def test_a_cell_the_kernels_cannot_carry_is_refused(monkeypatch):
    """Past MAX_SIZES (here 5 gates) or without a Triton step, the drivers say so before launching."""
    from tsrnn.ops.recurrence import cells_triton
    from tsrnn.ops.recurrence.cells import Cell

    wide = Cell("wide", gates=tuple("abcde"), states=("c",), saved=("a",), step=_leaky_step)
    monkeypatch.setitem(cells.CELLS, wide.name, wide)
    with pytest.raises(ValueError, match=r"the cell wide has no Triton step"):
        cells_triton.constexprs("wide", "forward")
    monkeypatch.setitem(cells_triton.CELLS_TRITON, wide.name, cells_triton.TritonCell(leaky_forward, leaky_backward))
    with pytest.raises(ValueError, match=r"the cell wide has sizes \{'G': 5\}"):
        cells_triton.constexprs("wide", "backward")
