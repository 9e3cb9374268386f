"""A run's claim (experiments/claims.py): held by the process that took it and by the trainer it
passed it to, so that a second worker leaves the run alone until both have ended, and released
however they end."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from experiments import claims

HOLD = """
import os, subprocess, sys
from pathlib import Path
from experiments import claims
fd = claims.claim(Path(sys.argv[1]))
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], pass_fds=(fd,),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # not the pipes read below
print(child.pid, flush=True)
os._exit(0)  # killed outright: its trainer goes on
"""


def test_a_claim_outlives_its_taker_while_the_trainer_it_passed_it_to_lives(tmp_path):
    run = tmp_path / "run"
    taker = subprocess.run([sys.executable, "-c", HOLD, str(run)], capture_output=True, text=True, timeout=60,
                           cwd=Path(claims.__file__).resolve().parents[1])
    assert taker.returncode == 0, taker.stderr
    trainer = int(taker.stdout.split()[0])
    try:
        assert claims.held(run) and claims.claim(run) is None
    finally:
        os.kill(trainer, 9)
    deadline = time.time() + 10  # the kernel releases the flock as the trainer exits
    while claims.held(run) and time.time() < deadline:
        time.sleep(0.05)
    fd = claims.claim(run)
    assert fd is not None
    try:
        assert claims.held(run)  # held by this process now: another open of the file is refused
    finally:
        os.close(fd)
    assert not claims.held(run)
