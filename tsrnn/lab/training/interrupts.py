"""SIGINT and SIGTERM during training: finish the step, save, stop.

Inside ``deferred()``, the first SIGINT (Ctrl-C) or SIGTERM only records itself; the trainer
looks at ``Deferred.signal`` before each step, writes ``last.pt`` and raises ``Interrupted``,
which the CLI reports in one line with exit code 128 + the signal's number (130, 143). A second
signal stops at once with ``KeyboardInterrupt`` (the last checkpoint written stays intact: saves
are atomic). Outside the training loop the handlers are Python's own.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """Training stopped by a signal after saving; ``code`` is the exit code (128 + signal number)."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.code = 128 + signum


class Deferred:
    """The first signal received (its number), or None."""

    def __init__(self):
        self.signal: int | None = None

    def _handle(self, signum, frame):
        if self.signal is not None:
            raise KeyboardInterrupt(f"a second {signal.Signals(signum).name}")
        self.signal = signum


@contextmanager
def deferred():
    """Defer SIGINT and SIGTERM to the next step boundary (only in the main thread, where Python
    delivers signals; elsewhere signals keep their handlers and ``signal`` stays None)."""
    state = Deferred()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    previous = {signum: signal.signal(signum, state._handle) for signum in SIGNALS}
    try:
        yield state
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
