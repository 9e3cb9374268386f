"""The campaign's queue and how it calls an entry: the committed queue parses, an entry without its
record or module is refused, ``{data}`` is filled in and the runs go one at a time on one thread,
and the campaign runs in Linux's idle scheduling class."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from experiments import campaign


def test_an_entry_is_called_one_run_at_a_time_with_the_data_folder_filled_in(tmp_path):
    entry = {"record": "r", "module": "experiments.m", "args": ["--brown", "{data}/brown/brown.zip"]}
    args = argparse.Namespace(data=str(tmp_path), runs="/runs", results="/results")
    assert campaign.command(entry, args)[1:] == ["-m", "experiments.m", "--brown", f"{tmp_path}/brown/brown.zip",
                                                 "--jobs", "1", "--threads", "1", "--runs", "/runs", "--out",
                                                 "/results"]


def test_the_queue_names_each_entrys_record_and_module(tmp_path):
    queue = tmp_path / "q.toml"
    queue.write_text('[[entry]]\nrecord = "a"\nmodule = "experiments.a"\n[[entry]]\nrecord = "b"\n')
    with pytest.raises(ValueError, match=r"an entry lacks \['module'\]"):
        campaign.entries(queue)
    queue.write_text('[[entry]]\nrecord = "a"\nmodule = "experiments.a"\n')
    assert campaign.entries(queue) == [{"record": "a", "module": "experiments.a", "protocol": "a", "args": []}]
    assert [e["record"] for e in campaign.entries(campaign.QUEUE)][0] == "frequency_time_scaled"


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="Linux's scheduling classes")
def test_the_campaign_runs_in_the_idle_class_and_its_children_inherit_it():
    code = ("import os, subprocess, sys; from experiments.campaign import idle; idle(); "
            "child = subprocess.run([sys.executable, '-c', 'import os; print(os.sched_getscheduler(0))'], "
            "capture_output=True, text=True).stdout; print(os.sched_getscheduler(0), child.strip())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(os.SCHED_IDLE)] * 2
