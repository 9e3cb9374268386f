"""The disk cache of "auto"'s verdicts and measured choices (tsrnn.backend.cache): kept across
processes, one file per identity, safe for writers at once, a damaged or foreign file ignored with
one warning and rewritten; the shape classes that let an epoch's smaller last batch reuse a choice."""
import json
import multiprocessing
import os
import subprocess
import sys
import warnings

import pytest
import torch

import tsrnn
from tsrnn import backend
from tsrnn.backend import cache, choice, timing, trust
from conftest import needs_native

pytestmark = [needs_native, pytest.mark.usefixtures("clean_backend_state")]
CPU = torch.device("cpu")

# A fresh process: an LSTM's forward and backward through "auto" (on CPU two candidates, onednn and
# cpu: cpu is verified, both are timed), printing how often it verified and timed, and its choices.
COUNTED_RUN = """
import json, torch, tsrnn
from tsrnn.backend import timing, trust
counts = {"verified": 0, "timed": 0}
verify, fastest = trust._verify, timing.fastest
def counted(name, function):
    def run(*args):
        counts[name] += 1
        return function(*args)
    return run
trust._verify, timing.fastest = counted("verified", verify), counted("timed", fastest)
torch.manual_seed(0)
tsrnn.LSTM(3, 4)(torch.randn(5, 2, 3))[0].sum().backward()
print(json.dumps({**counts, "choices": tsrnn.backend.tuned_choices()}))
"""


def counted_run(folder) -> dict:
    env = {**os.environ, "TSRNN_CACHE_DIR": str(folder), "OMP_NUM_THREADS": "1"}
    for name in ("TSRNN_BACKEND", "TSRNN_AUTOTUNE", "TSRNN_VERIFY"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", COUNTED_RUN], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def cache_files(folder):
    return sorted(folder.glob("choices-*.json"))


def lstm_forward_backward(batch, steps=5):
    torch.manual_seed(0)
    lstm = tsrnn.LSTM(3, 4)
    lstm(torch.randn(steps, batch, 3))[0].sum().backward()


@pytest.fixture
def counts(monkeypatch):
    """How often "auto" verified and timed in this process, from now on."""
    seen = {"verified": 0, "timed": 0}

    def counted(name, function):
        def run(*args):
            seen[name] += 1
            return function(*args)
        return run

    monkeypatch.setattr(trust, "_verify", counted("verified", trust._verify))
    monkeypatch.setattr(timing, "fastest", counted("timed", timing.fastest))
    return seen


def test_a_second_process_reuses_the_first_ones_verdicts_and_choices(tmp_path):
    first = counted_run(tmp_path)
    assert first["verified"] == 1 and first["timed"] == 1
    (file,) = cache_files(tmp_path)
    written = json.loads(file.read_text())
    assert written["header"]["device"].startswith("cpu:") and written["header"]["tsrnn"] == tsrnn.__version__
    assert len(written["verdicts"]) == 1 and len(written["choices"]) == 1
    second = counted_run(tmp_path)
    assert second["verified"] == 0 and second["timed"] == 0
    assert second["choices"] == first["choices"]


def test_a_smaller_last_batch_reuses_its_class_choice(counts):
    """B=19 after B=20: the same power-of-two class, so neither verified nor timed again; B=40 is
    another class (timed), of the same regime (not verified)."""
    lstm_forward_backward(20)
    assert counts == {"verified": 1, "timed": 1}
    lstm_forward_backward(19)
    assert counts == {"verified": 1, "timed": 1}
    lstm_forward_backward(40)
    assert counts == {"verified": 1, "timed": 2}


def test_a_damaged_file_is_ignored_with_one_warning_and_rewritten(counts):
    lstm_forward_backward(4)
    (file,) = cache_files(cache.directory())
    for damage in ("{not json", json.dumps({"header": {}, "verdicts": {}}), json.dumps([1, 2])):
        file.write_text(damage)
        backend.forget()
        cache.forget()
        choice._tuned.clear()
        trust._verdicts.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lstm_forward_backward(4)
        messages = [str(w.message) for w in caught if "backend cache" in str(w.message)]
        assert len(messages) == 1 and "is ignored and rewritten" in messages[0], messages
        written = json.loads(file.read_text())  # rewritten: valid, with this process's entries
        assert len(written["verdicts"]) == 1 and len(written["choices"]) == 1
    assert counts == {"verified": 4, "timed": 4}


def test_a_foreign_file_is_ignored(counts, monkeypatch):
    """Another tsrnn version has another file; a file holding another identity's header under this
    one's name is ignored (warned once) and rewritten."""
    lstm_forward_backward(4)
    (file,) = cache_files(cache.directory())
    with monkeypatch.context() as other_version:
        other_version.setattr(tsrnn._version, "VERSION", "0.0.0-other")
        backend.forget()
        cache.forget()
        choice._tuned.clear()
        trust._verdicts.clear()
        lstm_forward_backward(4)
    assert counts == {"verified": 2, "timed": 2}  # nothing reused
    assert len(cache_files(cache.directory())) == 2
    foreign = json.loads(file.read_text())
    foreign["header"]["torch"] = "0.0.0"
    file.write_text(json.dumps(foreign))
    cache.forget()
    with pytest.warns(RuntimeWarning, match="written for another identity"):
        store = cache._store(CPU)
    assert store.entries == {"verdicts": {}, "choices": {}}
    assert json.loads(file.read_text())["header"]["torch"] == torch.__version__


def _write_keys(worker: int, count: int) -> None:
    for i in range(count):
        cache.record(CPU, "choices", f"worker {worker} key {i}", "cpu")


def test_writers_at_once_lose_no_entry():
    """Processes writing different keys at the same time (DDP ranks): every entry is on disk, in
    one valid file."""
    workers, count = 4, 15
    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=_write_keys, args=(w, count)) for w in range(workers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    (file,) = cache_files(cache.directory())
    written = json.loads(file.read_text())["choices"]
    assert written == {f"worker {w} key {i}": "cpu" for w in range(workers) for i in range(count)}
    assert [p.name for p in cache.directory().iterdir() if p.name.endswith(".tmp")] == []


def test_the_fixed_rules_and_recorded_choices_outrank_the_cache(monkeypatch):
    """TSRNN_AUTOTUNE=0 and deterministic algorithms take the first verified candidate whatever
    the cache measured; a checkpoint's recorded choice (reuse_choices) is taken before the cache's."""
    call = backend.Call("recurrence", CPU, torch.float32, (5, 2, 3, 4), "lstm", grad=True)
    key = repr((call.recorded_key(), ("onednn", "cpu")))
    cache.record(CPU, "choices", key, "cpu")
    monkeypatch.setattr(timing, "fastest", lambda *a: pytest.fail("timed a class the cache holds"))
    lstm_forward_backward(2)
    assert backend.tuned_choices() == {call.recorded_key(): "cpu"}
    monkeypatch.setenv("TSRNN_AUTOTUNE", "0")
    backend.forget()
    choice._tuned.clear()
    lstm_forward_backward(2)
    assert backend.tuned_choices() == {}  # not tuned: the first candidate, onednn
    assert choice.MEMO and {p.name for p in choice.MEMO.values()} == {"onednn"}
    monkeypatch.delenv("TSRNN_AUTOTUNE")
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        backend.forget()
        lstm_forward_backward(2)
    finally:
        torch.use_deterministic_algorithms(before)
    assert backend.tuned_choices() == {call.recorded_key(): "onednn"}
    choice._tuned.clear()
    backend.reuse_choices({call.recorded_key(): "onednn"})
    lstm_forward_backward(2)
    assert backend.tuned_choices() == {call.recorded_key(): "onednn"}


def test_an_empty_cache_dir_turns_the_cache_off(monkeypatch, tmp_path, counts):
    monkeypatch.setenv("TSRNN_CACHE_DIR", "")
    monkeypatch.chdir(tmp_path)
    lstm_forward_backward(4)
    assert cache.directory() is None and list(tmp_path.iterdir()) == []
    assert counts == {"verified": 1, "timed": 1}


def test_the_default_folder_is_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("TSRNN_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.directory() == tmp_path / "tsrnn"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache.directory() == tmp_path / ".cache" / "tsrnn"
