"""The recurrence op: the recurrent layers (LSTM, pLSTM) over a whole sequence."""
