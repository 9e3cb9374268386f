"""Reproductions of the seeds' headline results at sizes a 2-core CPU trains in about an hour each.

One module per claim (``python -m experiments.NAME``); each writes ``results/NAME.json`` and
``results/NAME.png``, and ``python -m experiments.table`` writes their table into
``REPRODUCTION.md``. ``--size toy`` runs a script in seconds (CI does, for every script).
"""
