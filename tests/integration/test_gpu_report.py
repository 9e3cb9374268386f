"""bench/gpu_report.py, the one-call GPU report, stays runnable: its quick CPU mode runs the same
code on tiny shapes (Triton through the interpreter) and writes the JSON a GPU run would."""
import importlib.util
import json
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

from tsrnn import backend

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "gpu_report.py"


@pytest.mark.slow  # a training script in its own process
@pytest.mark.skipif(not backend.triton_available(), reason="triton is not installed")
def test_gpu_report_quick_cpu_run(tmp_path, capsys):
    report = _load_report()
    out = tmp_path / "new" / "report.json"  # a folder that does not exist yet is made
    assert report.main(["--device", "cpu", "--quick", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert all(row["ok"] for row in data["checks"])
    checked = {row["kernel"] for row in data["checks"]}
    on_cpu = ["cpu", "triton_step"]  # what runs here (Triton through the interpreter)
    for cell in ("lstm", "plstm_coupled", "plstm_separate"):
        assert {f"{cell} {path}" for path in on_cpu} <= checked
    assert "lstm onednn" in checked
    for cell in ("lstm", "plstm_coupled", "plstm_separate"):  # a variable-length batch on every path
        assert {f"{cell} {path} lengths unsorted" for path in on_cpu} <= checked
    timed = {(r["cell"], r["path"]) for r in data["lengths_vs_padded"] if r["speedup"] > 0}
    assert {("lstm", "cpu"), ("plstm", "cpu"), ("lstm", "onednn"), ("plstm", "auto")} <= timed
    row = data["recurrences_fwd_bwd_ms"][0]
    for path in ("auto", "triton_step"):
        assert row[f"MTS-LSTM {path}"] > 0 and row[f"pLSTM {path}"] > 0
    for name in ("MTS-LSTM cudnn", "MTS-LSTM cuda_grid", "pLSTM cuda_grid"):  # GPU paths: the reason is recorded
        assert row[name] is None and "CUDA tensors" in row["errors"][name]
    assert row["auto chose"]["MTS-LSTM auto"][0] in ("onednn", "cpu")
    for name in ("torch.nn.LSTM", "MTS-LSTM reference", "pLSTM reference"):
        assert row[name] > 0
    for model in ("MTS-LSTM", "pLSTM"):  # the emulated plan's configuration and the cost model's time
        predicted = row["predicted"][f"{model} cuda_cluster"]
        assert predicted["config"][0] > 0 and predicted["ms"] > 0
    assert data["linear_scan"]["scan_ms"] > 0
    # the tensor-core kernels' sweep and the flag barrier's stress job, on the emulated kernels
    swept = {(r["kernel"], r["cell"], r["precision"]) for r in data["tensor_core_sweep"]
             if r["plan"][0] > 0 and r["variants"] and all(v["ok"] and v["ms"] > 0 for v in r["variants"])}
    assert {(k, c, p) for k in ("cluster", "grid") for c in ("lstm", "plstm_coupled") for p in ("tf32", "bf16")} <= swept
    assert data["flag_barrier_stress"] and all(r["ok"] and r["launches"] > 0 and r["differing"] == 0
                                               for r in data["flag_barrier_stress"])
    graphs = {r["model"]: r for r in data["cuda_graphs"]}  # eager steps only: nothing captures on the CPU
    assert set(graphs) == {"lstm", "mts-lstm", "plstm"}
    assert all(r["eager_ms"] > 0 and "need a GPU" in r["graphs"] and "replay_ms" not in r for r in graphs.values())
    assert data["jobs"][0]["job"] == "probe"  # the probe first, into probe/ beside the JSON
    assert data["probe"]["parts"]["trace"] == "ok" and data["probe"]["parts"]["ladder"] == "ok"
    assert (out.parent / "probe" / "probe.md").exists()
    # what the device tool brings back from $OUT: at most 8 files, at most two folders down, plain names
    files = [path.relative_to(out.parent) for path in out.parent.rglob("*") if path.is_file()]
    assert len(files) <= 8 and all(len(f.parts) <= 3 and all(re.fullmatch(r"[\w.-]+", n, re.A) for n in f.parts)
                                   for f in files), files
    assert data["jobs"] and all(job["rc"] == 0 and not job["timed_out"] for job in data["jobs"])
    assert "===== timings:5,2,8: rc 0" in pathlib.Path(str(out) + ".log").read_text()
    assert "wrote" in capsys.readouterr().out


def test_a_job_past_its_limit_is_stopped_and_recorded(tmp_path, monkeypatch):
    """A hung kernel must not eat the GPU session: its job is killed at its limit, and the report
    says so; a missing command fails its job only; a job that would start past the deadline is
    recorded as skipped."""
    report = _load_report()
    monkeypatch.setitem(report.LIMITS, "pytest", 1)
    monkeypatch.setattr(report, "SHORTEST_JOB", 0.5)
    args = report.argparse.Namespace(json=str(tmp_path / "r.json"), device="cpu", repeats=1, quick=True)
    runner = report.Runner(args, deadline=None)
    sleep = [sys.executable, "-c", "import time; print('hung', flush=True); time.sleep(60)"]
    runner.run("pytest", sleep)
    assert runner.jobs[0]["timed_out"] and runner.jobs[0]["seconds"] < 30
    assert runner.runs == [{"run": "pytest", "ok": False, "summary": "stopped at its limit | hung"}]
    runner.run("memcheck", [str(tmp_path / "no-such-tool")])  # a missing tool fails its job alone
    assert runner.jobs[1]["rc"] == 127 and "could not start" in runner.runs[1]["summary"]
    runner.deadline = report.time.monotonic()
    runner.run("selftest", sleep)
    assert runner.jobs[2] == {"job": "selftest", "skipped": "past the deadline"}


def test_every_job_of_a_gpu_run_has_a_limit():
    names = [name for name, _ in _load_report().plan("cuda", quick=False)]
    assert {"throw", "pytest", "memcheck", "racecheck", "synccheck", "checks:cuda_cluster", "checks:cuda_grid", "checks:linear_scan",
            "scan", "lengths", "sweep:grid", "sweep:cluster", "stress", "graphs"} <= set(names)
    assert all(name.partition(":")[0] in _load_report().LIMITS for name in names)


def test_skip_and_only_choose_jobs_by_name_or_stage_and_refuse_other_names():
    report = _load_report()
    jobs = report.plan("cuda", quick=False)
    names = lambda skip, only: [name for name, _ in report.selected(jobs, skip, only)]  # noqa: E731
    assert names([], None) == [name for name, _ in jobs]
    assert names(["timings", "probe"], None) == [n for n, _ in jobs if not n.startswith("timings:") and n != "probe"]
    assert names([], ["memcheck", "checks:cuda_grid", "checks:cuda_cluster", "memcheck"]) == [
        "memcheck", "checks:cuda_grid", "checks:cuda_cluster"]  # --only's order, each job once
    assert names(["checks:cudnn"], ["checks"]) == [n for n, _ in jobs if n.startswith("checks:") and n != "checks:cudnn"]
    with pytest.raises(SystemExit, match="checks:cuda_gird"):  # a job no plan has: refused, not ignored
        report.selected(jobs, ["checks:cuda_gird"], None)
    with pytest.raises(SystemExit) as refused:  # a stage no plan has: refused by the parser, before any build
        report.arguments(["--only", "memchek"])
    assert refused.value.code == 2


def test_the_prepared_gpu_calls_parse_and_name_only_jobs_of_the_gpu_plan():
    """bench/RESULTS.md's commands for the next GPU session: a stale option or job name there would
    cost device time."""
    section = (SCRIPT.parent / "RESULTS.md").read_text().split("## The next GPU session, prepared")[1].split("\n## ")[0]
    commands = re.findall(r'python bench/gpu_report\.py ([^"]+)"', section)
    assert len(commands) == 2
    report = _load_report()
    jobs = report.plan("cuda", quick=False)
    chosen = []
    for command in commands:
        args = report.arguments([word for word in shlex.split(command) if word != "$B"])
        assert args.deadline and args.json.startswith("$OUT/")
        chosen.append([name for name, _ in report.selected(jobs, args.skip, args.only)])
    assert chosen[0][:2] == ["probe", "throw"] and not {"pytest", "flashrnn"} & {n.partition(":")[0] for n in chosen[0]}
    assert chosen[1] == ["checks:cuda_cluster", "checks:cuda_grid", "memcheck", "racecheck", "synccheck", "graphs"]


def test_a_prediction_that_cannot_be_made_is_recorded_and_the_timings_go_on():
    import torch

    if torch.cuda.is_available():
        pytest.skip("here CUDA can plan: the point is a device where it cannot")
    predicted = _load_report().predictions("cuda", (5, 2, 8), torch.float32)
    assert set(predicted) == {f"{m} {p}" for m in ("MTS-LSTM", "pLSTM") for p in ("cuda_cluster", "cuda_grid")}
    assert all(r["ms"] is None and r["config"] is None and r["error"] for r in predicted.values())


def _load_report():
    spec = importlib.util.spec_from_file_location("gpu_report", SCRIPT)
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    return report


def test_every_test_file_the_report_and_conftest_name_exists():
    """A GPU session must not spend device time on a pytest row that fails at collection."""
    root = SCRIPT.parents[1]
    report = _load_report()
    for entry in (*report.GPU_TESTS, *report.SANITIZED_TESTS):
        if entry.endswith(".py") or ".py::" in entry:
            assert (root / entry.split("::")[0]).is_file(), f"gpu_report.py names {entry}, which does not exist"


@pytest.mark.slow  # a training script in its own process
@pytest.mark.parametrize("run", ["GPU_TESTS", "SANITIZED_TESTS"])
def test_the_report_s_pytest_runs_collect_tests(run):
    """Each pytest run of the report collects, and each file (and each -k alternative) selects tests."""
    args = getattr(_load_report(), run)
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                          cwd=SCRIPT.parents[1], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    for path in (a for a in args if a.endswith(".py")):
        assert any(line.startswith(path + "::") for line in collected), f"{run}: nothing collected from {path}"
    if "-k" in args:
        for alternative in args[args.index("-k") + 1].split(" or "):
            name = alternative.strip("() ").split(" and ")[0]
            assert any(name in line.split("::")[-1] for line in collected), f"{run}: -k selects no {name}"
