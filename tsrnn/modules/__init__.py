"""The recurrent modules of tsrnn."""
from tsrnn.modules.lstm import LSTM
from tsrnn.modules.plstm import PowerLawLSTM

__all__ = ["LSTM", "PowerLawLSTM"]
