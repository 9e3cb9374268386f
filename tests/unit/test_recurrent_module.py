"""tsrnn.Recurrent: any cell without per-unit parameters or a step input, by name."""
import pytest
import torch

import tsrnn
from tsrnn.ops.recurrence import cells

PLAIN = [name for name, cell in cells.CELLS.items() if not (cell.params or cell.step_input)]


def test_the_lstm_cell_is_torch_lstm():
    """With the LSTM cell and the same parameters, the module is torch.nn.LSTM: float64, two
    bidirectional layers."""
    torch.manual_seed(0)
    ours = tsrnn.Recurrent(3, 5, "lstm", num_layers=2, bidirectional=True, dtype=torch.float64)
    theirs = torch.nn.LSTM(3, 5, num_layers=2, bidirectional=True, dtype=torch.float64)
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(7, 2, 3, dtype=torch.float64)
    (out, (h, c)), (out_t, (h_t, c_t)) = ours(x), theirs(x)
    for got, want in ((out, out_t), (h, h_t), (c, c_t)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("cell", PLAIN)
def test_chrono_sets_the_forget_bias_in_its_range(cell):
    module = tsrnn.Recurrent(3, 64, cell, chrono=50.0)
    rows = module.cell.gates.index("f")
    b_f = module.bias_ih_l0[rows * 64:(rows + 1) * 64]
    assert (b_f >= 0).all() and (b_f <= torch.log(torch.tensor(49.0)) + 1e-6).all() and b_f.std() > 0.1
    assert not module.bias_hh_l0.any()
    if "i" in module.cell.gates:
        i = module.cell.gates.index("i")
        torch.testing.assert_close(module.bias_ih_l0[i * 64:(i + 1) * 64], -b_f)


@pytest.mark.parametrize("make, match", [
    (lambda: tsrnn.Recurrent(3, 4, "plstm_coupled"), "without per-unit parameters"),
    (lambda: tsrnn.Recurrent(3, 4, "gru"), "cell must be one of"),
    (lambda: tsrnn.Recurrent(3, 4, "lstm", constants={"beta": 1.0}), "has no constant 'beta'"),
    (lambda: tsrnn.Recurrent(3, 4, "lstm", bias=False, chrono=10.0), "needs bias=True"),
])
def test_bad_arguments_are_clear_errors(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_a_constant_that_is_not_a_real_number_is_a_type_error():
    with pytest.raises(TypeError, match="beta must be a real number, got str"):
        tsrnn.Recurrent(3, 4, "janet", constants={"beta": "1"})
