"""ONNX export (``torch.onnx.export(..., dynamo=True)``) of the modules, run in onnxruntime and
compared with the module: the LSTM and MTS-LSTM as ONNX LSTM nodes (static length, the fixed
biases folded into the bias) or as an ONNX Scan (dynamic length), the pLSTM as a Scan; a
variable-length call is refused with a clear error."""
import warnings

import numpy as np
import pytest
import torch

import tsrnn

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

MODULES = {
    "lstm": lambda: tsrnn.LSTM(3, 5, 2),
    "mts": lambda: tsrnn.LSTM(3, 5, timescales=[torch.linspace(1.0, 40.0, 5)], freeze="all"),
    "plstm": lambda: tsrnn.PowerLawLSTM(3, 5, 2),
    "plstm_separate": lambda: tsrnn.PowerLawLSTM(3, 5, input_gate="separate"),
}


class _WithDt(torch.nn.Module):
    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, x, dt):
        return self.module(x, dt=dt)


def _export(module, inputs, dynamic_shapes, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(module, inputs, dynamo=True, dynamic_shapes=dynamic_shapes, verbose=False)
    program.save(str(path))
    return {node.op_type for node in program.model.graph}, ort.InferenceSession(str(path))


def _check(session, module, *inputs):
    names = [i.name for i in session.get_inputs()]
    got = session.run(None, {n: t.numpy() for n, t in zip(names, inputs)})
    with torch.no_grad():
        out, state = module(*inputs)
    assert len(got) == 1 + len(state)
    for value, expected in zip(got, (out, *state)):
        np.testing.assert_allclose(value, expected.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", list(MODULES))
def test_dynamic_length_exports_as_a_scan(kind, tmp_path):
    torch.manual_seed(0)
    module = MODULES[kind]().eval()
    T, B = torch.export.Dim("T", min=1), torch.export.Dim("B", min=1)
    ops, session = _export(module, (torch.randn(6, 2, 3),), ({0: T, 1: B},), tmp_path / "m.onnx")
    assert "Scan" in ops and "LSTM" not in ops
    for shape in [(6, 2, 3), (11, 5, 3), (1, 1, 3)]:
        _check(session, module, torch.randn(*shape))


@pytest.mark.parametrize("kind", ["lstm", "mts"])
def test_static_length_lstm_exports_as_onnx_lstm_nodes(kind, tmp_path):
    """An ONNX LSTM node per layer, the effective bias (the MTS layer's fixed timescale biases
    folded in) as its bias; any batch size. torch.export specializes torch's LSTM kernel to the
    traced length, as for torch.nn.LSTM."""
    torch.manual_seed(1)
    module = MODULES[kind]().eval()
    ops, session = _export(module, (torch.randn(6, 2, 3),), ({1: torch.export.Dim("B", min=1)},), tmp_path / "m.onnx")
    assert "LSTM" in ops and "Scan" not in ops
    for batch in (2, 7, 1):
        _check(session, module, torch.randn(6, batch, 3))


def test_plstm_with_step_lengths(tmp_path):
    torch.manual_seed(2)
    module = _WithDt(MODULES["plstm"]()).eval()
    T, B = torch.export.Dim("T", min=1), torch.export.Dim("B", min=1)
    _, session = _export(module, (torch.randn(6, 2, 3), torch.rand(6, 2) + 0.5), ({0: T, 1: B}, {0: T, 1: B}),
                         tmp_path / "m.onnx")
    _check(session, module, torch.randn(9, 4, 3), torch.rand(9, 4) + 0.1)


def test_a_variable_length_call_is_refused_clearly():
    class WithLengths(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = tsrnn.LSTM(3, 5)

        def forward(self, x, lengths):
            return self.lstm(x, lengths=lengths)

    with pytest.raises(Exception, match="take full-length sequences: lengths= and PackedSequence"):
        torch.onnx.export(WithLengths(), (torch.randn(6, 2, 3), torch.tensor([6, 3])), dynamo=True, verbose=False)
