"""Reproductions of the seeds' headline results at sizes a 2-core CPU can train, over training seeds.

One module per claim (``python -m experiments.NAME``); each writes ``results/NAME.json`` and
``results/NAME.png``, and ``python -m experiments.table`` writes their table into
``REPRODUCTION.md``. ``--size toy`` runs a script in seconds (CI does, for every script).
"""
