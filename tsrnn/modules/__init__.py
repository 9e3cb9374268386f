"""The recurrent modules of tsrnn."""
from tsrnn.modules.lstm import LSTM
from tsrnn.modules.plstm import PowerLawLSTM
from tsrnn.modules.recurrent import Recurrent

__all__ = ["LSTM", "PowerLawLSTM", "Recurrent"]
