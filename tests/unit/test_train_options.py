"""``tsrnn train``'s options (tsrnn/lab/train_options.py): grouped by task in --help with every default
shown, an option of another task refused in one line, and ``tsrnn --version``."""
from __future__ import annotations

import re

import pytest

import tsrnn
from tsrnn.lab import cli, cli_checks, train_options
from tsrnn.lab.training import commands
from tsrnn.lab.training.tasks import TASKS
from tsrnn.lab.training.tasks.base import COMMON_DEFAULTS

OPTIONS = {flag: (spec, tasks) for flag, spec, tasks, _, _ in train_options._options()}
DESTS = {train_options._dest(flag, spec): flag for flag, (spec, _) in OPTIONS.items()}


def _train_help(capsys) -> str:
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    return capsys.readouterr().out


def test_the_table_is_the_parser():
    parser = cli._parser()[1]["train"]
    parsed = {action.option_strings[-1] for action in parser._actions if action.option_strings} - {"--help"}
    assert parsed == set(OPTIONS)


@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_option_a_task_reads_applies_to_it(task):
    """The options a task defaults or keys its model by are the options the table gives it."""
    cls = TASKS[task]
    read = ({k for k, v in cls.defaults.items() if v is not None} | set(cls.model_keys)) & set(DESTS)
    refused = {dest for dest in read if train_options.tasks_of(dest) is not None and task not in train_options.tasks_of(dest)}
    assert not refused, f"--task {task} reads {sorted(refused)}, which the table gives to other tasks"


def test_help_groups_options_by_task_and_shows_every_default(capsys):
    text = _train_help(capsys)
    titles = [title for title, _, _, _ in train_options.GROUPS]
    positions = [text.index(f"\n{title}:\n") for title in titles]
    assert positions == sorted(positions)
    flat = " ".join(text.split())  # argparse wraps lines
    for dest, flag in DESTS.items():
        spec, tasks = OPTIONS[flag]
        values = {task: TASKS[task].defaults.get(dest) for task in tasks or train_options.TASK_NAMES}
        if dest in COMMON_DEFAULTS:
            values = {"all": COMMON_DEFAULTS[dest]}
        for task, value in values.items():
            if value is None or isinstance(value, bool):
                continue
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            assert re.search(rf"{re.escape(flag)}\b.*?default: [^\]]*\b{re.escape(shown)}\b", flat), (flag, task, shown)
    assert "default: lm 0.003, averaging-lm 0.003, mlp-lm 0.003, dyck 0.01" in flat
    assert "imdb 128 (lstm, chrono), 154 (plstm)" in flat


def _outside(tasks):
    return next(task for task in train_options.TASK_NAMES if task not in tasks)


CASES = [(flag, _outside(tasks)) for flag, (spec, tasks) in OPTIONS.items() if tasks is not None]


@pytest.mark.parametrize("flag,task", CASES, ids=[f"{flag}-{task}" for flag, task in CASES])
def test_an_option_of_another_task_is_refused_in_one_line(tmp_path, capsys, monkeypatch, flag, task):
    monkeypatch.setattr(commands, "train", lambda args: pytest.fail("train ran despite an option of another task"))
    spec, tasks = OPTIONS[flag]
    value = [] if spec.get("action") in ("store_true", "store_false") else \
        [spec["choices"][0] if "choices" in spec else "1"]
    assert cli.main(["train", "--task", task, flag, *value, "--out", str(tmp_path / "run")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"tsrnn train: error: {flag} is an option of --task {' / '.join(tasks)}, not of --task {task}"]


@pytest.mark.parametrize("flag", [flag for flag, (_, tasks) in OPTIONS.items() if tasks is not None])
def test_an_option_of_the_task_is_not_refused(tmp_path, flag):
    spec, tasks = OPTIONS[flag]
    dest = train_options._dest(flag, spec)
    for task in tasks:
        args = cli._parser()[0].parse_args(["train", "--task", task, "--out", str(tmp_path / "run")])
        args.given = {dest: flag}
        problem = cli_checks._foreign_option_problem(args)
        assert problem is None or "is an option of" not in problem, (task, problem)


def test_nonmono_needs_sgd(tmp_path, capsys):
    assert cli.main(["train", "--nonmono", "5", "--out", str(tmp_path / "run")]) == 2
    assert "give --optimizer sgd" in capsys.readouterr().err


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"tsrnn {tsrnn.__version__} (torch ") and "tsrnn._C " in line and "\n" not in line
