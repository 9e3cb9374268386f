"""The seeds' interpretability analyses as library functions (``tsrnn analyze`` runs them on a
checkpoint and writes their figures and a JSON summary).

- ``timescales``: unit timescales from the mean forget gate (seed 000 Eq. 3), Inverse-Gamma and
  narrow-Gaussian fits by KS statistic (Figure 1), assigned vs estimated (Figure 4), and two LMs'
  distributions side by side (Figure 1: PTB vs Markov-PTB, ``comparison``).
- ``forget_map``: forget gates over a test window, units sorted and grouped by 10 (Figure 5).
- ``word_ablation``: the cell-state change after ablating a word k steps back (A.4, Figures 6-8).
- ``routing``: perplexity by word frequency with chunks of layer 2 zeroed (§3.2.4, Figure 3).
- ``plstm``: learned p and its two-sample t-test, reset traces and later-reset units, unit ablation
  (seed 002 §5.2-5.3).
- ``by_length``: IMDB accuracy per review-length bin with Wilson intervals (seed 002 Figure 4).
- ``receptive_fields``: TILT's receptive fields in an MLP LM (seed 004 Figures 2-4).
- ``passes``: the shared test-stream passes and trace reductions.

Every function takes a model (and data) and returns plain numbers; the ``figure`` functions draw
those numbers with matplotlib (optional: ``pip install matplotlib``).
"""
from tsrnn.lab.analysis import by_length, forget_map, passes, plstm, receptive_fields, routing, timescales, word_ablation

__all__ = ["by_length", "forget_map", "passes", "plstm", "receptive_fields", "routing", "timescales", "word_ablation"]
