"""The scripts of ``examples/`` run end to end at their ``--toy`` size, each in a fresh process
started outside the repository (this tree's tsrnn first on its path), print their result line, and
end saying that a toy run only checks the script (it trains too briefly to beat the baseline)."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # the example scripts, trained at toy size in their own processes

ROOT = pathlib.Path(__file__).resolve().parents[2]
PERPLEXITY = r"validation perplexity \d+\.\d \(unigram model: \d+\.\d\)"
RESULT = {  # each script's result line
    "awd_lstm_multitimescale.py": PERPLEXITY,
    "plstm_irregular_series.py": r"test accuracy \d+\.\d% \(chance: 50%\)",
    "tilt_next_word.py": PERPLEXITY,
}


@pytest.mark.parametrize("script", RESULT)
def test_example_runs_at_toy_size(script, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, str(ROOT / "examples" / script), "--toy"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-4000:]
    assert re.search(RESULT[script], result.stdout), result.stdout
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("toy run: checks that the script runs end to end; it trains too briefly to beat "), last
