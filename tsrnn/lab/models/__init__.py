"""Models built from the tsrnn layers, one per seed experiment.

- ``AWDLSTMLM``: AWD-LSTM language model with LSTM, multi-timescale or pLSTM layers (seed 000).
- ``AveragingLM``: the Averaging RNN-LM (seed 001, S10).
- ``MLPLM``: Bengio's MLP LM with Buffer, TILT or TILT-Buffer context (seed 004).
- ``DyckModel``: the Dyck-2 closing-bracket predictor (seed 000 §3.1.2).
- ``CopyModel``: the copy-task model, LSTM, chrono-initialized LSTM or pLSTM (seed 002 §4.1).
- ``SequenceClassifier``: one LSTM, chrono or pLSTM layer read at each sequence's end (seed 002 §4.2, §4.4).
- ``FrequencyModel``: the frequency discrimination classifier (seed 002 §5.4).
- ``SentimentModel``: the IMDB sentiment classifier (seed 002 §4.4).

The matching data generators and metrics are in ``tsrnn.lab.data.dyck``, ``tsrnn.lab.data.copy`` and
``tsrnn.lab.data.sine_waves``.
"""
from tsrnn.lab.models.awd_lstm import AWDExtras, AWDLSTMLM, embedded_dropout, locked_dropout
from tsrnn.lab.models.averaging_lm import AveragingLM
from tsrnn.lab.models.classifier import SequenceClassifier
from tsrnn.lab.models.copy import CopyModel
from tsrnn.lab.models.dyck import DyckModel
from tsrnn.lab.models.frequency import FrequencyModel
from tsrnn.lab.models.mlp_lm import MLPLM
from tsrnn.lab.models.sentiment import SentimentModel

__all__ = ["AWDLSTMLM", "AWDExtras", "AveragingLM", "CopyModel", "DyckModel", "FrequencyModel", "MLPLM", "SentimentModel", "SequenceClassifier",
           "embedded_dropout", "locked_dropout"]
