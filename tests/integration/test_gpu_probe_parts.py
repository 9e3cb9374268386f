"""The GPU probe's profiler parts keep working between GPU runs: bench/probe/profile.py on its CPU
stand-in, bench/probe/ncu.py against a stand-in ncu (a script written here that prints ncu's raw
CSV: a row of metric names, a row of units, a row per profiled launch)."""
import json
import pathlib
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from probe import ncu, profile  # noqa: E402
from probe.context import Context  # noqa: E402


def context(tmp_path, seconds=60.0):
    return Context("cpu", True, tmp_path, time.monotonic() + seconds)


def test_timeline_merges_overlaps_and_measures_the_gaps_between():
    events = [("a", 0.0, 10.0, 10.0), ("b", 5.0, 15.0, 10.0), ("c", 20.0, 25.0, 5.0), ("d", 21.0, 22.0, 1.0),
              ("a", 40.0, 41.0, 1.0)]  # b overlaps a, d lies inside c
    assert profile.timeline(events) == {"busy_us": 21.0, "span_us": 41.0, "idle_us": 20.0, "gap_count": 2,
                                        "largest_gaps_us": [15.0, 5.0]}
    table = profile.kernel_table(events)
    assert list(table) == ["a", "b", "c", "d"] and table["a"] == {"calls": 2, "total_us": 11.0}


def test_profile_cpu_stand_in_records_kernels_gaps_and_the_cudnn_comparison(tmp_path):
    record = profile.run(context(tmp_path))
    assert record["status"] == "ok" and "stand-in" in record["stand_in"] and "stopped" not in record
    runs = {run["model"]: run for run in record["runs"]}
    assert set(runs) == {"torch.nn.LSTM", "tsrnn cudnn", "tsrnn MTS cudnn", "tsrnn tensor_core"}
    assert runs["tsrnn cudnn"]["path"] == runs["tsrnn MTS cudnn"]["path"] == "onednn"
    assert runs["tsrnn tensor_core"]["path"] == "cpu"
    for run in runs.values():
        assert run["status"] == "ok", run
        assert 0 < run["host_ms"] <= run["wall_ms"]
        assert 0 < run["busy_us"] <= run["span_us"]
        assert run["idle_us"] == pytest.approx(run["span_us"] - run["busy_us"], abs=0.2)
        assert all(gap >= 0 for gap in run["largest_gaps_us"]) and len(run["largest_gaps_us"]) <= profile.GAPS
        assert run["largest_gaps_us"] == sorted(run["largest_gaps_us"], reverse=True)
        assert 0 < len(run["kernels"]) <= profile.TOP
        assert all(row["calls"] > 0 and row["total_us"] >= 0 for row in run["kernels"])
        assert sum(row["calls"] for row in run["kernels"]) <= run["kernel_count"]
    assert any(row["name"].startswith("tsrnn") for row in runs["tsrnn tensor_core"]["kernels"])  # its own op
    assert not any(row["name"].startswith("tsrnn") for row in runs["torch.nn.LSTM"]["kernels"])
    compared, compared_mts = record["cudnn_vs_torch"]
    assert (compared["model"], compared_mts["model"]) == profile.CUDNN_MODELS
    only_path = {row["name"] for row in compared["only_in_cudnn_path"]}
    only_torch = {row["name"] for row in compared["only_in_torch_nn_lstm"]}
    both = {row["name"] for row in compared["in_both"]}
    assert both and not (only_path | only_torch) & both and not only_path & only_torch
    assert all(len(row["calls"]) == len(row["total_us"]) == 2 for row in compared["in_both"])
    difference = compared["cudnn_path_minus_torch"]
    assert difference["host_ms"] == pytest.approx(runs["tsrnn cudnn"]["host_ms"] - runs["torch.nn.LSTM"]["host_ms"])
    assert difference["span_us"] == pytest.approx(runs["tsrnn cudnn"]["span_us"] - runs["torch.nn.LSTM"]["span_us"])
    assert len(json.dumps(record)) < 20_000  # a small record, no trace


def test_profile_stops_at_the_deadline(tmp_path):
    record = profile.run(context(tmp_path, seconds=0.0))
    assert record["runs"] == [] and record["stopped"].startswith("deadline")


FAKE = '''#!{python}
"""A stand-in for ncu: logs its arguments, answers --query-metrics, prints a raw CSV page."""
import json, os, sys
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
if {mode!r} == "no counters":
    print("==PROF== Connected to process 4321")
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
          "Counters on the target device 0.")
    print("==ERROR== The application returned an error code (1).")
    sys.exit(1)
if "--query-metrics" in args:
    print("Device NVIDIA H100 80GB HBM3 (GH100)")
    print("Metric Name                                      Metric Description")
    for name in ("gpu__time_duration", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld",
                 "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st", "sm__pipe_tensor_op_hmma_cycles_active",
                 "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active",
                 "smsp__average_warps_issue_stalled_barrier_per_issue_active"):
        print(f"{{name:48}} a description")
    sys.exit(0)
kernel = next((a for a in args if a.startswith("regex:")), "regex:at::vectorized_elementwise_kernel")[6:]
columns = [("ID", "", "0"), ("Process ID", "", "4321"), ("Process Name", "", "python"), ("Host Name", "", "h"),
           ("Kernel Name", "", kernel.replace(".*", "(anonymous namespace)::") + "(ForwardArgs, Shape)"),
           ("Context", "", "1"), ("Stream", "", "7"), ("Block Size", "", "(256, 1, 1)"), ("Grid Size", "", "(8, 1, 1)"),
           ("Device", "", "0"), ("CC", "", "9.0"),
           ("gpu__time_duration.sum", "msecond", "1.25"),
           ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "41.5"),
           ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "%", "12.25"),
           ("sm__warps_active.avg.pct_of_peak_sustained_active", "%", "6.1"),
           ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "", "1,234,567"),
           ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "", "0"),
           ("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", "%", "3.5"),
           ("smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", "ratio", "2.5"),
           ("smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio", "ratio", "7.75"),
           ("smsp__average_warps_issue_stalled_membar_per_issue_active.ratio", "ratio", "0"),
           ("smsp__pcsamp_warps_issue_stalled_barrier", "", "1,024"),
           ("smsp__pcsamp_warps_issue_stalled_barrier_not_issued", "", "9")]
print("==PROF== Connected to process 4321")
print("==PROF== Profiling " + kernel + ": 0%....50%....100% - 40 passes")
for row in zip(*columns):
    print(",".join('"' + value + '"' for value in row))
print("==PROF== Disconnected from process 4321")
'''


def fake_ncu(tmp_path, monkeypatch, mode):
    script, log = tmp_path / "ncu", tmp_path / "ncu_args.jsonl"
    script.write_text(FAKE.format(python=sys.executable, log=str(log), mode=mode))
    script.chmod(0o755)
    monkeypatch.setenv("TSRNN_PROBE_NCU", str(script))
    return log


def test_ncu_parses_the_raw_csv_of_each_kernel(tmp_path, monkeypatch):
    log = fake_ncu(tmp_path, monkeypatch, "ok")
    record = ncu.run(context(tmp_path / "out"))
    assert record["status"] == "ok", record
    assert [k["kernel"] for k in record["kernels"]] == ["cluster forward", "cluster backward", "grid forward",
                                                         "grid backward"]
    for kernel in record["kernels"]:
        assert kernel["status"] == "ok", kernel
        family, direction = kernel["kernel"].split()
        assert f"tsrnn::cuda::{family}::" in kernel["name"] and f"{direction}_kernel" in kernel["name"]
        assert kernel["duration_us"] == pytest.approx(1250.0)  # 1.25 msecond
        assert (kernel["sm_throughput_pct"], kernel["memory_throughput_pct"], kernel["achieved_occupancy_pct"]) == \
            (41.5, 12.25, 6.1)
        assert kernel["dram_throughput_pct"] is None  # not in the CSV
        assert (kernel["bank_conflicts_ld"], kernel["bank_conflicts_st"]) == (1234567.0, 0.0)
        assert kernel["tensor_pipe_pct"] == 3.5 and "hmma" in kernel["tensor_pipe_metric"]
        assert kernel["stalls"] == {"barrier": 7.75, "long_scoreboard": 2.5}  # largest first, zeros left out
        assert list(kernel["stalls"]) == ["barrier", "long_scoreboard"]
        assert kernel["stall_samples"] == {"barrier": 1024.0}
        saved = (tmp_path / "out" / kernel["csv"]).read_text()
        assert saved.startswith('"ID"') and "==PROF==" not in saved
    # the metrics asked for are those the device listed; each kernel run profiles one warm launch
    assert "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active" not in record["metrics_requested"]
    assert "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active" in record["metrics_requested"]
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    check, query, *runs = calls
    assert "-c" in check and query == ["--query-metrics"] and len(runs) == 4
    for args in runs:
        assert args[args.index("--clock-control") + 1] == "none"
        assert args[args.index("--launch-skip") + 1] == str(ncu.WARMUP)
        assert args[args.index("--launch-count") + 1] == "1"
        assert int(args[-1]) > ncu.WARMUP  # the target makes a call past the skipped ones
        assert {args[i + 1] for i, a in enumerate(args) if a == "--section"} == set(ncu.SECTIONS)
        assert args[args.index("--metrics") + 1] == ",".join(record["metrics_requested"])


def test_ncu_that_cannot_read_counters_is_skipped_with_its_line(tmp_path, monkeypatch):
    log = fake_ncu(tmp_path, monkeypatch, "no counters")
    record = ncu.run(context(tmp_path))
    assert record["status"] == "skipped"
    assert "ERR_NVGPUCTRPERM" in record["reason"] and "\n" not in record["reason"]
    assert len(log.read_text().splitlines()) == 1  # the first, tiny run only


def test_ncu_missing_is_skipped(tmp_path, monkeypatch):
    monkeypatch.delenv("TSRNN_PROBE_NCU", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ncu, "PLACES", [str(tmp_path / "ncu")])
    record = ncu.run(context(tmp_path))
    assert record == {"status": "skipped", "reason": record["reason"]} and record["reason"].startswith("ncu not found")
