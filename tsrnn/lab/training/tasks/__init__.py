"""The training tasks of the seeds, as the trainer sees them.

Each task builds its data and model from the command-line arguments, lists the batches of an
epoch (deterministic given the seed, sharded by rank), computes a batch's loss, and evaluates a
split. ``config()`` is what identifies the model: a checkpoint only resumes or evaluates under an
equal config.

- ``base``: ``Task``, ``COMMON_DEFAULTS`` and ``TASKS``, the registry by --task name.
- ``language``: the language models (lm, averaging-lm, mlp-lm).
- ``sequences``: the synthetic sequence tasks (dyck, copy).
- ``classification``: one label per sequence (freq, pixels, imdb).
"""
from tsrnn.lab.training.tasks.base import COMMON_DEFAULTS, TASKS, Task, register
from tsrnn.lab.training.tasks.language import (AveragingLanguageModelTask, LanguageModelTask, MaskedTextTask,
                                           MLPLanguageModelTask, TextTask, ahead_targets, normalized_loss,
                                           token_losses)
from tsrnn.lab.training.tasks.sequences import CopyTask, DyckTask
from tsrnn.lab.training.tasks.classification import ClassificationTask, FrequencyTask, PixelsTask, SentimentTask

__all__ = ["TASKS", "register", "Task", "COMMON_DEFAULTS", "TextTask", "LanguageModelTask", "MaskedTextTask",
           "AveragingLanguageModelTask", "MLPLanguageModelTask", "ahead_targets", "normalized_loss",
           "token_losses", "DyckTask", "CopyTask", "ClassificationTask", "FrequencyTask", "PixelsTask", "SentimentTask"]
