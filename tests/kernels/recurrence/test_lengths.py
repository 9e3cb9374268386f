"""Variable-length batches: ``lengths=`` and PackedSequence input on every path.

The reference's masked loop is checked against each row run alone; every path against the
reference through tsrnn.testing's table (cells x LENGTH_CASES, float64 forward, backward and final
states; float32 and bf16 on one case); the modules against torch.nn.LSTM's packed path; streaming
(a state carried into the next call); the operator's packed layout (no step of an ended row is
computed); and the errors.
"""
import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import tsrnn
from tsrnn import backend, functional, reference, testing
from tsrnn.ops.recurrence import cells
from tsrnn.ops.recurrence.packing import Packing
from tsrnn.testing import TOLERANCE
from conftest import assert_close

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
EXACT = TOLERANCE["float64 reordered"]


def _skip_unless_runs(path, cell, shape, dtype=torch.float64):
    reason = testing.why_not(path, cell, shape, dtype, DEVICE)
    if reason:
        pytest.skip(reason)


@pytest.mark.parametrize("cell", list(cells.CELLS))
def test_reference_masked_loop_runs_each_row_alone(cell):
    """Row b of the masked loop equals the loop run on that row alone for its lengths[b] steps;
    past its end the output and traces are zero, and a row of length 0 keeps its initial state."""
    args = testing.layer_args(cell, 6, 5, 3, 4, seed=1, dt=cells.get(cell).params != ())
    lengths = torch.tensor([3, 6, 0, 1, 6])
    fn = getattr(reference, "plstm" if cells.get(cell).params else "lstm")
    out, finals, forget = fn(**args, lengths=lengths)
    for b, steps in enumerate(lengths.tolist()):
        assert (out[steps:, b] == 0).all() and (forget[steps:, b] == 0).all()
        if steps == 0:
            for name, final in zip(("h0", "c0", "a0"), finals):
                assert torch.equal(final[b], args[name][b])
            continue
        alone = {k: (v[:steps, b:b + 1] if k in ("x", "dt") and v is not None else
                     v[b:b + 1] if k in ("h0", "c0", "a0") else v) for k, v in args.items()}
        out_b, finals_b, forget_b = fn(**alone)
        assert_close(out[:steps, b], out_b[:, 0], EXACT, "out")
        assert_close(forget[:steps, b], forget_b[:, 0], EXACT, "forget")
        for final, final_b in zip(finals, finals_b):
            assert_close(final[b], final_b[0], EXACT, "final state")


@pytest.mark.parametrize("shape", testing.LENGTH_SHAPES, ids=str)
@pytest.mark.parametrize("case", testing.LENGTH_CASES)
@pytest.mark.parametrize("cell", list(cells.CELLS))
@pytest.mark.parametrize("path", testing.LAYER_PATHS)
def test_path_with_lengths_matches_the_reference(path, cell, case, shape):
    _skip_unless_runs(path, cell, shape)
    result = testing.compare(path, cell, shape, torch.float64, DEVICE, dt=cells.get(cell).params != (), seed=3,
                             lengths=case)
    assert result.ok, f"{path} {cell} {case}: {result.failures()}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("cell", list(cells.CELLS))
@pytest.mark.parametrize("path", testing.LAYER_PATHS)
def test_path_with_lengths_in_low_precision(path, cell, dtype):
    _skip_unless_runs(path, cell, (9, 6, 5, 7), dtype)
    result = testing.compare(path, cell, (9, 6, 5, 7), dtype, DEVICE, dt=cells.get(cell).params != (), seed=4,
                             lengths="unsorted")
    assert result.ok, f"{path} {cell} {dtype}: {result.failures()}"


@pytest.mark.parametrize("path", testing.LAYER_PATHS)
def test_strided_inputs_with_lengths(path):
    for cell in cells.CELLS:
        if testing.why_not(path, cell, (6, 4, 5, 4), torch.float64, DEVICE):
            continue
        result = testing.compare(path, cell, (6, 4, 5, 4), torch.float64, DEVICE, dt=cells.get(cell).params != (),
                                 contiguous=False, seed=5, lengths="with zeros")
        assert result.ok, f"{path} {cell}: {result.failures()}"


@pytest.mark.parametrize("path", testing.LAYER_PATHS)
def test_gradcheck_with_lengths(path):
    fast = DEVICE == "cpu" and path.startswith("triton")
    runs = [c for c in cells.CELLS if not testing.why_not(path, c, (4, 3, 2, 3), torch.float64, DEVICE)]
    if not runs:
        pytest.skip(testing.why_not(path, "lstm", (4, 3, 2, 3), torch.float64, DEVICE))
    for cell in runs:
        assert testing.gradcheck(path, cell, (4, 3, 2, 3), DEVICE, seed=6, lengths=[2, 4, 1], fast=fast), (path, cell)


def _module(kind, backend, batch_first=False):
    torch.manual_seed(7)
    if kind == "lstm":
        m = tsrnn.LSTM(3, 5, num_layers=2, batch_first=batch_first, backend=backend, dtype=torch.float64,
                       timescales=[None, torch.linspace(1, 30, 5)])
    else:
        m = tsrnn.PowerLawLSTM(3, 5, num_layers=2, batch_first=batch_first, backend=backend, dtype=torch.float64,
                               input_gate=kind.split("_")[1])
    return m.to(DEVICE)


@pytest.mark.parametrize("kind", ["lstm", "plstm_coupled", "plstm_separate"])
@pytest.mark.parametrize("path", testing.LAYER_PATHS)
def test_streaming_continues_each_row_from_its_end(path, kind):
    """Two calls with lengths, the state of the first carried into the second, equal each row's
    two pieces run as one sequence alone."""
    _skip_unless_runs(path, "lstm" if kind == "lstm" else kind, (6, 4, 3, 5))
    m = _module(kind, path)
    g = torch.Generator().manual_seed(8)
    x1, x2 = (torch.randn(6, 4, 3, generator=g, dtype=torch.float64).to(DEVICE) for _ in range(2))
    first, second = torch.tensor([6, 2, 4, 0]), torch.tensor([3, 6, 1, 5])
    _, state = m(x1, lengths=first)
    out2, finals = m(x2, state, lengths=second)
    for b in range(4):
        joined = torch.cat([x1[:first[b], b], x2[:second[b], b]]).unsqueeze(1)
        out_b, finals_b = m(joined)
        assert_close(out2[:second[b], b], out_b[first[b]:, 0], EXACT, f"row {b} out")
        for final, final_b in zip(finals, finals_b):
            assert_close(final[:, b], final_b[:, 0], EXACT, f"row {b} final state")


@pytest.mark.parametrize("enforce_sorted", [False, True])
@pytest.mark.parametrize("path", testing.LAYER_PATHS)
def test_packed_input_matches_torch_lstm(path, enforce_sorted):
    """tsrnn.LSTM on a PackedSequence returns what torch.nn.LSTM returns (a PackedSequence of the
    same layout, h_n and c_n per row), gradients included, with an initial state given."""
    _skip_unless_runs(path, "lstm", (7, 4, 3, 5))
    torch.manual_seed(7)
    m = tsrnn.LSTM(3, 5, num_layers=2, batch_first=True, backend=path, dtype=torch.float64).to(DEVICE)
    theirs = torch.nn.LSTM(3, 5, num_layers=2, batch_first=True, dtype=torch.float64).to(DEVICE)
    theirs.load_state_dict(m.state_dict())
    g = torch.Generator().manual_seed(9)
    x = torch.randn(4, 7, 3, generator=g, dtype=torch.float64).to(DEVICE)
    hx = tuple(torch.randn(2, 4, 5, generator=g, dtype=torch.float64).to(DEVICE) for _ in range(2))
    lengths = torch.tensor([7, 5, 5, 2]) if enforce_sorted else torch.tensor([2, 7, 5, 5])
    results = []
    for module in (m, theirs):
        xr, hr = x.clone().requires_grad_(), tuple(h.clone().requires_grad_() for h in hx)
        out, (h_n, c_n) = module(pack_padded_sequence(xr, lengths, batch_first=True, enforce_sorted=enforce_sorted),
                                 hr)
        padded, out_lengths = pad_packed_sequence(out, batch_first=True)
        loss = testing.loss_of(padded, (h_n, c_n))
        results.append((out, padded, h_n, c_n, *torch.autograd.grad(loss, [xr, *hr, *module.parameters()])))
    ours, expected = results
    assert torch.equal(ours[0].batch_sizes, expected[0].batch_sizes)
    for name, a, b in zip(["sorted_indices", "unsorted_indices"], ours[0][2:], expected[0][2:]):
        assert (a is None and b is None) or torch.equal(a, b), name
    for k, (a, b) in enumerate(zip(ours[1:], expected[1:])):
        assert_close(a, b, TOLERANCE[torch.float64], f"result {k}")


@pytest.mark.parametrize("input_gate", ["coupled", "separate"])
@pytest.mark.parametrize("path", testing.LAYER_PATHS)
def test_plstm_packed_input_with_dt_equals_lengths(path, input_gate):
    """PowerLawLSTM on a PackedSequence (dt packed alike) equals the padded input with lengths."""
    _skip_unless_runs(path, f"plstm_{input_gate}", (6, 4, 3, 5))
    m = _module(f"plstm_{input_gate}", path)
    g = torch.Generator().manual_seed(10)
    x = torch.randn(6, 4, 3, generator=g, dtype=torch.float64).to(DEVICE)
    dt = (torch.rand(6, 4, generator=g, dtype=torch.float64) + 0.5).to(DEVICE)
    lengths = torch.tensor([2, 6, 3, 6])
    out, finals = m(pack_padded_sequence(x, lengths, enforce_sorted=False),
                    dt=pack_padded_sequence(dt, lengths, enforce_sorted=False))
    out_l, finals_l = m(x, dt=dt, lengths=lengths)
    assert_close(pad_packed_sequence(out, total_length=6)[0], out_l, EXACT, "out")
    for a, b in zip(finals, finals_l):
        assert_close(a, b, EXACT, "final states")
    with pytest.raises(TypeError, match="dt must be a PackedSequence"):
        m(pack_padded_sequence(x, lengths, enforce_sorted=False), dt=dt)


@pytest.mark.parametrize("path", testing.LAYER_PATHS)
def test_forget_gates_and_traces_with_lengths_are_zero_past_the_ends(path):
    _skip_unless_runs(path, "plstm_coupled", (5, 3, 3, 5))
    m = _module("plstm_coupled", path, batch_first=True)
    x = torch.randn(3, 5, 3, dtype=torch.float64, device=DEVICE)
    lengths = torch.tensor([5, 2, 0])
    for layer in m.trace(x, lengths=lengths):
        for name in ("r", "a", "f"):
            assert layer[name].shape == (5, 3, 5)
            assert (layer[name][2:, 1] == 0).all() and (layer[name][:, 2] == 0).all(), name
            assert (layer[name][:2, 1] != 0).any()
    forget = m.forget_gates(x, lengths=lengths)
    assert forget[0].shape == (5, 3, 5) and (forget[1][:, 2] == 0).all()


@pytest.mark.parametrize("path", testing.LAYER_PATHS)
def test_all_lengths_zero_runs_no_step(path):
    _skip_unless_runs(path, "lstm", (4, 2, 3, 5))
    m = _module("lstm", path)
    x = torch.randn(4, 2, 3, dtype=torch.float64, device=DEVICE)
    hx = tuple(torch.randn(2, 2, 5, dtype=torch.float64, device=DEVICE) for _ in range(2))
    out, (h_n, c_n) = m(x, hx, lengths=[0, 0])
    assert (out == 0).all() and torch.equal(h_n, hx[0]) and torch.equal(c_n, hx[1])


@pytest.mark.parametrize("path", testing.LAYER_PATHS)
def test_operator_packed_layout(path):
    """The packed operator's outputs: h_all and saved of the N packed rows only, state_all with the
    rows a step does not run left zero (no uninitialized memory, even with fresh memory filled with
    NaN) and every row it ran finite, state_n each row's after its last step."""
    from tsrnn import backend

    if backend.REGISTRY[path].kind != "operator":
        pytest.skip("not an operator path")
    _skip_unless_runs(path, "plstm_coupled", (5, 4, 3, 6))
    batch_sizes = torch.tensor([4, 3, 3, 1, 1])
    n, hidden = int(batch_sizes.sum()), 6
    g = torch.Generator().manual_seed(11)
    xg = torch.randn(n, 3 * hidden, generator=g, dtype=torch.float64).to(DEVICE)
    w_hh = torch.randn(3 * hidden, hidden, generator=g, dtype=torch.float64).to(DEVICE) * 0.3
    h0 = torch.zeros(4, hidden, dtype=torch.float64, device=DEVICE)
    state0 = torch.ones(2, 4, hidden, dtype=torch.float64, device=DEVICE)
    params = torch.full((1, hidden), 0.5, dtype=torch.float64, device=DEVICE)
    before = torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        h_all, state_n, state_all, saved = backend.op(path, "recurrence_forward")(
            "plstm_coupled", xg, w_hh, h0, state0, params, None, [1e-3], True, batch_sizes)
    finally:
        torch.use_deterministic_algorithms(before[0])
        torch.utils.deterministic.fill_uninitialized_memory = before[1]
    assert h_all.shape == (n, hidden) and saved.shape == (n, 4 * hidden) and state_all.shape == (5, 2, 4, hidden)
    assert torch.isfinite(h_all).all() and torch.isfinite(saved).all()
    for t, rows in enumerate(batch_sizes.tolist()):
        assert torch.isfinite(state_all[t, :, :rows]).all() and (state_all[t, :, :rows] != 0).any()
        assert (state_all[t, :, rows:] == 0).all(), f"step {t}: a row past its end is not zero"
    for b, last in enumerate([4, 2, 2, 0]):
        assert torch.equal(state_n[:, b], state_all[last, :, b])


def test_packing_round_trip():
    lengths = torch.tensor([3, 0, 5, 5, 1])
    packing = Packing.from_lengths(lengths, 6)
    assert packing.batch_sizes.tolist() == [4, 3, 3, 2, 2] and packing.live == 4 and packing.rows == 14
    x = torch.randn(6, 5, 2)
    packed = packing.pack(x)
    expected = pack_padded_sequence(x[:, lengths > 0], lengths[lengths > 0], enforce_sorted=False)
    assert torch.equal(packed, expected.data)
    back = packing.unpack(packed)
    mask = torch.arange(6).unsqueeze(1) < lengths
    assert torch.equal(back, x * mask.unsqueeze(-1))
    assert torch.equal(packing.mask, mask)


@pytest.mark.parametrize("bad, error, match", [
    (torch.tensor([1.0, 2.0]), TypeError, "1-D integer tensor"),
    (torch.tensor([[1, 2]]), TypeError, "1-D integer tensor"),
    (torch.tensor([1, 2, 3]), ValueError, "lengths must have shape"),
    (torch.tensor([1, 5]), ValueError, r"must be in \[0, 4\]"),
    (torch.tensor([-1, 2]), ValueError, r"must be in \[0, 4\]"),
    ([1.5, 2], TypeError, "1-D integer tensor"),
])
def test_bad_lengths_are_refused(bad, error, match):
    m = tsrnn.LSTM(3, 4)
    with pytest.raises(error, match=match):
        m(torch.randn(4, 2, 3), lengths=bad)
    args = testing.layer_args("lstm", 4, 2, 3, 4)
    with pytest.raises(error, match=match):
        functional.lstm(**args, lengths=bad)


def test_lengths_with_packed_or_unbatched_input_is_refused():
    m = tsrnn.LSTM(3, 4)
    packed = pack_padded_sequence(torch.randn(4, 2, 3), torch.tensor([4, 2]))
    with pytest.raises(ValueError, match="PackedSequence carries its own"):
        m(packed, lengths=torch.tensor([4, 2]))
    with pytest.raises(ValueError, match="needs a batched input"):
        m(torch.randn(4, 3), lengths=torch.tensor([4]))


def test_lengths_as_a_list_and_batch_first():
    m = _module("lstm", "auto", batch_first=True)
    x = torch.randn(3, 5, 3, dtype=torch.float64, device=DEVICE)
    out, (h_n, _) = m(x, lengths=[5, 1, 3])
    out_t, (h_t, _) = m(x, lengths=torch.tensor([5, 1, 3]))
    assert torch.equal(out, out_t) and torch.equal(h_n, h_t)
    assert out.shape == (3, 5, 5) and (out[1, 1:] == 0).all()
    assert_close(h_n[-1, 1], out[1, 0], EXACT, "h_n of a row of one step")


def test_bad_batch_sizes_are_refused_by_the_operator():
    xg = torch.randn(5, 8, dtype=torch.float64)
    args = (torch.randn(8, 2, dtype=torch.float64), torch.zeros(3, 2, dtype=torch.float64),
            torch.zeros(1, 3, 2, dtype=torch.float64), None, None, [], False)
    forward = backend.op("cpu", "recurrence_forward")
    with pytest.raises(RuntimeError, match="non-increasing"):
        forward("lstm", xg, *args, torch.tensor([2, 3]))
    with pytest.raises(RuntimeError, match=r"in \[1, B=3\]"):
        forward("lstm", xg, *args, torch.tensor([4, 1]))
    with pytest.raises(RuntimeError, match="sums to 4"):
        forward("lstm", xg, *args, torch.tensor([3, 1]))
    with pytest.raises(RuntimeError, match="int64"):
        forward("lstm", xg, *args, torch.tensor([3, 2], dtype=torch.int32))
    with pytest.raises(RuntimeError, match="xg must have 2 dimensions"):
        forward("lstm", xg.view(5, 1, 8), *args, torch.tensor([3, 2]))
