"""A checkpoint save SIGKILLed before its rename leaves its temporary file; the next run into the
folder deletes it, and nothing deletes the temporary file of a save still in progress in another
process. Real processes: the save is ``checkpoint.save`` in a child whose ``torch.save`` writes
half a checkpoint and then waits, so the kill lands inside the save."""
import subprocess
import sys
import textwrap
import time

import pytest

from tsrnn.lab import cli
from tsrnn.lab.training import checkpoint

SAVER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from tsrnn.lab.training import checkpoint

    folder = Path(sys.argv[1])

    def stalled(payload, f):  # torch.save writing half a checkpoint, then stalled: the kill comes now
        f.write(b"half a checkpoint")
        f.flush()
        (folder / "writing").touch()
        time.sleep(600)

    checkpoint.torch.save = stalled
    checkpoint.save(folder / sys.argv[2], {"model": {}})
""")


def saving(folder, name="last.pt"):
    """A process inside ``checkpoint.save(folder / name)``, once its temporary file is written."""
    process = subprocess.Popen([sys.executable, "-c", SAVER, str(folder), name], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (folder / "writing").exists():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the save did not start in time"
        time.sleep(0.02)
    (folder / "writing").unlink()
    return process


def temporary_files(folder):
    return sorted(p.name for p in folder.glob(".*.tmp"))


def killed(process):
    process.kill()
    process.communicate(timeout=60)


def test_a_run_into_the_folder_of_killed_saves_deletes_their_temporary_files(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for name in ("last.pt", "best.pt"):
        killed(saving(run, name))
    left = temporary_files(run)
    assert len(left) == 2 and all(checkpoint.TEMPORARY.fullmatch(name) for name in left), left
    assert cli.main(["train", "--task", "copy", "--nhid", "8", "--delay", "3", "--batch-size", "4", "--max-steps",
                     "1", "--backend", "reference", "--quiet", "--out", str(run)]) == 0
    assert temporary_files(run) == []
    assert (run / "last.pt").is_file()


def test_a_save_in_progress_in_another_process_keeps_its_temporary_file(tmp_path):
    (tmp_path / ".best.pt.0badf00d.tmp").write_bytes(b"an orphan")  # of a save killed earlier
    process = saving(tmp_path)
    try:
        in_progress = temporary_files(tmp_path)
        assert len(in_progress) == 2
        assert checkpoint.remove_orphans(tmp_path) == []  # the other process is saving: nothing is deleted
        assert temporary_files(tmp_path) == in_progress
    finally:
        killed(process)
    assert [p.name for p in checkpoint.remove_orphans(tmp_path)] == in_progress
    assert temporary_files(tmp_path) == []


@pytest.mark.parametrize("name", [".last.pt.tmp", ".notes.txt.swp.tmp", "last.pt.0badf00d.tmp", ".x.0BADF00D.tmp"])
def test_only_the_temporary_files_of_saves_are_deleted(tmp_path, name):
    (tmp_path / name).write_bytes(b"someone else's")
    assert checkpoint.remove_orphans(tmp_path) == []
    assert (tmp_path / name).exists()
