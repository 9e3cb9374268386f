"""The synthetic tasks' data, kept under its first name: Dyck-2 lives in ``tsrnn.data.dyck`` now
and the copy tasks in ``tsrnn.data.copy``; this module re-exports their names."""
from tsrnn.data.copy import (IGNORE_INDEX, copy_accuracy, copy_baseline_loss, copy_lengths, copy_task,
                             variable_copy_task)
from tsrnn.data.copy import copy_sequence_accuracy  # noqa: F401  (public, though never listed in __all__)
from tsrnn.data.dyck import (DYCK_PAD, DYCK_SYMBOLS, Dyck2, DyckSplit, dyck2, dyck_mse, dyck_targets, encode_dyck,
                             sample_dyck, sequences_correct, whole_sequence_correct)

__all__ = [
    "DYCK_SYMBOLS", "DYCK_PAD", "DyckSplit", "Dyck2", "sample_dyck", "dyck_targets", "encode_dyck",
    "dyck2", "sequences_correct", "whole_sequence_correct", "dyck_mse",
    "IGNORE_INDEX", "copy_task", "variable_copy_task", "copy_lengths", "copy_baseline_loss", "copy_accuracy",
]
