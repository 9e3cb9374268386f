"""bench/gpu_report.py, the one-call GPU report, stays runnable: its quick CPU mode runs the same
code on tiny shapes (Triton through the interpreter) and writes the JSON a GPU run would."""
import importlib.util
import json
import pathlib

import pytest

from tsrnn import backend

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "bench" / "gpu_report.py"


@pytest.mark.skipif(not backend.triton_available(), reason="triton is not installed")
def test_gpu_report_quick_cpu_run(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("gpu_report", SCRIPT)
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    out = tmp_path / "report.json"
    assert report.main(["--device", "cpu", "--quick", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert all(row["ok"] for row in data["checks"])
    checked = {row["kernel"] for row in data["checks"]}
    on_cpu = ["cpu", "triton_persistent", "triton_step"]  # what runs here (Triton through the interpreter)
    for cell in ("lstm", "plstm_coupled", "plstm_separate"):
        assert {f"{cell} {path}" for path in on_cpu} <= checked
    assert "lstm onednn" in checked
    row = data["recurrences_fwd_bwd_ms"][0]
    for path in ("auto", "triton_persistent", "triton_step"):
        assert row[f"MTS-LSTM {path}"] > 0 and row[f"pLSTM {path}"] > 0
    for name in ("MTS-LSTM cudnn", "MTS-LSTM cuda_coop", "pLSTM cuda_coop"):  # GPU paths: the reason is recorded
        assert row[name] is None and "CUDA tensors" in row["errors"][name]
    assert row["auto chose"]["MTS-LSTM auto"][0] in ("onednn", "cpu")
    for name in ("torch.nn.LSTM", "MTS-LSTM reference", "pLSTM reference"):
        assert row[name] > 0
    assert "FlashRNN error" in row or row["FlashRNN fused LSTM"] is not None
    assert data["linear_scan"]["scan_ms"] > 0
    assert "wrote" in capsys.readouterr().out
