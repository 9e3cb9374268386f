"""Every refusal that torch.nn.LSTM also makes starts with torch's own message (issue 70), so code
and tests that match torch's messages keep working on tsrnn.LSTM and tsrnn.PowerLawLSTM.

The same bad constructor arguments and forward inputs go to torch.nn.LSTM and to the tsrnn module
(the pLSTM too wherever it takes the argument as torch does; its state gets a valid age a0 after
h0 and c0): tsrnn's error must be an instance of torch's exception type and its message must start
with torch's, as the installed torch formats it for that input (computed by calling torch, never
written here, so a torch version that words a message otherwise is compared with its own).
torch.nn.LSTM checks a PackedSequence's data and states with ``check_forward_args``, which
torch 2.13's forward does not call for one (its kernels then fail with messages of their own):
those cases compare with that check, called directly. Refusals of tsrnn's own (a flag torch does
not check, a bool as a size, the pLSTM's projection) are in test_errors_modules.py."""
import pytest
import torch
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

import tsrnn

I, H, P, L, T, B = 3, 5, 2, 2, 4, 3  # input size, hidden size, projection, layers, steps, batch (L, T, B differ)
MODULES = {"lstm": tsrnn.LSTM, "plstm": tsrnn.PowerLawLSTM}


def _error_of(call) -> Exception | None:
    try:
        call()
    except Exception as err:  # noqa: BLE001 (the type and the message are what is compared)
        return err
    return None


def assert_starts_with_torchs(theirs: Exception | None, ours: Exception | None) -> None:
    assert theirs is not None, "torch.nn.LSTM accepts this input: it is no case of this table"
    assert ours is not None, f"tsrnn accepts what torch refuses with: {theirs}"
    assert isinstance(ours, type(theirs)), f"torch raises {type(theirs).__name__}, tsrnn {type(ours).__mro__}"
    assert str(ours).startswith(str(theirs)), f"\ntorch: {theirs}\ntsrnn: {ours}"


# -- constructors --------------------------------------------------------------------------------
CONSTRUCTOR_CASES = {
    "dropout-negative": {"dropout": -0.1}, "dropout-above-1": {"dropout": 1.5},
    "dropout-nan": {"dropout": float("nan")}, "dropout-str": {"dropout": "0.5"}, "dropout-bool": {"dropout": True},
    "bias-str": {"bias": "False"}, "batch_first-int": {"batch_first": 1},
    "input_size-float": {"input_size": 3.0}, "input_size-0": {"input_size": 0},
    "input_size-negative": {"input_size": -1},
    "hidden_size-float": {"hidden_size": 5.0}, "hidden_size-0": {"hidden_size": 0},
    "hidden_size-negative": {"hidden_size": -2},
    "num_layers-0": {"num_layers": 0}, "num_layers-negative": {"num_layers": -1},
    "proj_size-negative": {"proj_size": -1}, "proj_size-hidden_size": {"proj_size": H},
    "proj_size-above-hidden_size": {"proj_size": H + 2},
}


@pytest.mark.parametrize("case", CONSTRUCTOR_CASES)
@pytest.mark.parametrize("kind", MODULES)
def test_constructor_refusals_start_with_torchs_message(kind, case):
    kwargs = {"input_size": I, "hidden_size": H, **CONSTRUCTOR_CASES[case]}
    assert_starts_with_torchs(_error_of(lambda: torch.nn.LSTM(**kwargs)), _error_of(lambda: MODULES[kind](**kwargs)))


# -- forward -------------------------------------------------------------------------------------
def _zeros(*shape, **kw):
    return torch.zeros(shape, **kw)


FORWARD_CASES = {
    # id: (module keywords, input, initial (h0, c0) or None, kinds)
    "input-features": ({}, lambda: torch.randn(T, B, I + 1), None, MODULES),
    "unbatched-input-features": ({}, lambda: torch.randn(T, I + 1), None, MODULES),
    "batch_first-input-features": ({"batch_first": True}, lambda: torch.randn(B, T, I + 1), None, MODULES),
    "input-0d": ({}, lambda: torch.tensor(1.0), None, MODULES),
    "input-1d": ({}, lambda: torch.randn(I), None, MODULES),
    "input-4d": ({}, lambda: torch.randn(T, B, 1, I), None, MODULES),
    "input-float64": ({}, lambda: torch.randn(T, B, I, dtype=torch.float64), None, MODULES),
    "input-int64": ({}, lambda: torch.ones(T, B, I, dtype=torch.int64), None, MODULES),
    "input-no-steps": ({}, lambda: torch.randn(0, B, I), None, MODULES),
    "unbatched-input-no-steps": ({}, lambda: torch.randn(0, I), None, MODULES),
    "batch_first-input-no-steps": ({"batch_first": True}, lambda: torch.randn(B, 0, I), None, MODULES),
    "input-other-device": ({}, lambda: torch.randn(T, B, I, device="meta"), None, MODULES),
    "h0-batch": ({}, lambda: torch.randn(T, B, I), lambda: (_zeros(L, B + 1, H), _zeros(L, B, H)), MODULES),
    "c0-batch": ({}, lambda: torch.randn(T, B, I), lambda: (_zeros(L, B, H), _zeros(L, B + 1, H)), MODULES),
    "h0-hidden": ({}, lambda: torch.randn(T, B, I), lambda: (_zeros(L, B, H - 1), _zeros(L, B, H)), MODULES),
    "c0-hidden": ({}, lambda: torch.randn(T, B, I), lambda: (_zeros(L, B, H), _zeros(L, B, H + 1)), MODULES),
    "h0-layers": ({}, lambda: torch.randn(T, B, I), lambda: (_zeros(L + 1, B, H), _zeros(L, B, H)), MODULES),
    "h0-2d-for-batched": ({}, lambda: torch.randn(T, B, I), lambda: (_zeros(B, H), _zeros(L, B, H)), MODULES),
    "c0-2d-for-batched": ({}, lambda: torch.randn(T, B, I), lambda: (_zeros(L, B, H), _zeros(B, H)), MODULES),
    "h0-4d-for-batched": ({}, lambda: torch.randn(T, B, I), lambda: (_zeros(L, B, H, 1), _zeros(L, B, H)), MODULES),
    "h0-3d-for-unbatched": ({}, lambda: torch.randn(T, I), lambda: (_zeros(L, 1, H), _zeros(L, H)), MODULES),
    "c0-1d-for-unbatched": ({}, lambda: torch.randn(T, I), lambda: (_zeros(L, H), _zeros(H)), MODULES),
    "unbatched-h0-hidden": ({}, lambda: torch.randn(T, I), lambda: (_zeros(L, H + 1), _zeros(L, H)), MODULES),
    "unbatched-c0-layers": ({}, lambda: torch.randn(T, I), lambda: (_zeros(L, H), _zeros(L + 1, H)), MODULES),
    "batch_first-h0-batch-first": ({"batch_first": True}, lambda: torch.randn(B, T, I),
                                   lambda: (_zeros(B, L, H), _zeros(L, B, H)), MODULES),
    "bidirectional-h0-rows": ({"bidirectional": True}, lambda: torch.randn(T, B, I),
                              lambda: (_zeros(L, B, H), _zeros(2 * L, B, H)), MODULES),
    "projection-h0-hidden": ({"proj_size": P}, lambda: torch.randn(T, B, I),
                             lambda: (_zeros(L, B, H), _zeros(L, B, H)), ["lstm"]),
    "projection-c0-projected": ({"proj_size": P}, lambda: torch.randn(T, B, I),
                                lambda: (_zeros(L, B, P), _zeros(L, B, P)), ["lstm"]),
    "h0-other-device": ({}, lambda: torch.randn(T, B, I),
                        lambda: (_zeros(L, B, H, device="meta"), _zeros(L, B, H)), MODULES),
    "c0-other-device": ({}, lambda: torch.randn(T, B, I),
                        lambda: (_zeros(L, B, H), _zeros(L, B, H, device="meta")), MODULES),
    "three-states": ({}, lambda: torch.randn(T, B, I), lambda: (_zeros(L, B, H),) * 3, ["lstm"]),
}


def _forward_params():
    for case, (_, _, _, kinds) in FORWARD_CASES.items():
        for kind in kinds:
            yield pytest.param(kind, case, id=f"{kind}-{case}")


def _with_age(module, state, batch: int | None):
    """``state`` with a valid a0 after it for the pLSTM (whose state is (h0, c0, a0)); ``batch``
    None for an unbatched input."""
    if not isinstance(module, tsrnn.PowerLawLSTM) or state is None:
        return state
    rows = module.num_layers * (2 if module.bidirectional else 1)
    return (*state, torch.zeros(rows, H) if batch is None else torch.zeros(rows, batch, H))


@pytest.mark.parametrize("kind, case", list(_forward_params()))
def test_forward_refusals_start_with_torchs_message(kind, case):
    kwargs, make_input, make_state, _ = FORWARD_CASES[case]
    theirs, ours = torch.nn.LSTM(I, H, L, **kwargs), MODULES[kind](I, H, L, **kwargs)
    x, state = make_input(), None if make_state is None else make_state()
    batch = None if x.dim() != 3 else x.shape[0 if ours.batch_first else 1]
    assert_starts_with_torchs(_error_of(lambda: theirs(x, state)),
                              _error_of(lambda: ours(x, _with_age(ours, state, batch))))


# -- PackedSequence ------------------------------------------------------------------------------
LENGTHS = [T, T - 1, 1]  # B rows, sorted


PACKED_CASES = {
    # id: (packed input, initial (h0, c0) or None)
    "features": (lambda: pack_padded_sequence(torch.randn(T, B, I + 1), LENGTHS), None),
    "float64": (lambda: pack_padded_sequence(torch.randn(T, B, I, dtype=torch.float64), LENGTHS), None),
    "data-3d": (lambda: PackedSequence(torch.randn(8, 1, I), torch.tensor([3, 3, 1, 1])), None),
    "h0-batch": (lambda: pack_padded_sequence(torch.randn(T, B, I), LENGTHS),
                 lambda: (_zeros(L, B - 1, H), _zeros(L, B, H))),
    "c0-hidden": (lambda: pack_padded_sequence(torch.randn(T, B, I), LENGTHS),
                  lambda: (_zeros(L, B, H), _zeros(L, B, H + 1))),
}


def _torchs_packed_check(module: torch.nn.LSTM, packed: PackedSequence, state) -> Exception | None:
    """What torch.nn.LSTM's own check of a PackedSequence's data and states raises."""
    data, batch_sizes = packed.data, packed.batch_sizes
    if state is None:
        state = (torch.zeros(module.get_expected_hidden_size(data, batch_sizes)),
                 torch.zeros(module.get_expected_cell_size(data, batch_sizes)))
    return _error_of(lambda: module.check_forward_args(data, state, batch_sizes))


@pytest.mark.parametrize("case", PACKED_CASES)
@pytest.mark.parametrize("kind", MODULES)
def test_packed_refusals_start_with_the_message_of_torchs_check(kind, case):
    make_input, make_state = PACKED_CASES[case]
    theirs, ours = torch.nn.LSTM(I, H, L), MODULES[kind](I, H, L)
    packed, state = make_input(), None if make_state is None else make_state()
    assert_starts_with_torchs(_torchs_packed_check(theirs, packed, state),
                              _error_of(lambda: ours(packed, _with_age(ours, state, int(packed.batch_sizes[0])))))
