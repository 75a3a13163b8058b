"""Ctrl-C where a trial can record it: inside a trial, never between two.

Python raises KeyboardInterrupt wherever SIGINT lands. Between two trials that is inside
Optuna: asking for the next trial (which Optuna has already created RUNNING, and then fails
without a reason of ours) or telling the last one (a storage write cut short). While
study.optimize runs, the gate lets SIGINT raise only inside a trial's objective, which records
the trial as interrupted; a SIGINT that lands elsewhere waits for the next trial to begin,
which records it at once, or for optimize to return, which then raises it.

Only the first SIGINT raises. A worker whose coordinator is killed gets its parent-death signal
once for every thread of the coordinator that dies (Linux reparents it from thread to thread),
and a second KeyboardInterrupt would cut short the very write that records the first. Later
SIGINTs wait until optimize has returned; by then the engine is stopped (its grace period is
bounded) and the trial recorded.

Python drops a KeyboardInterrupt raised while it runs a weakref callback or a `__del__`
(garbage collection, at any bytecode): it prints "Exception ignored" and goes on, and the
trial would run to its end. So the trial's objective calls `check` wherever it hears from its
engine (each phase, each estimate of the load test, the engine's answer), and a
KeyboardInterrupt raised but never delivered to the trial is raised again there.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TypeVar

T = TypeVar("T")


class InterruptGate:
    """Where SIGINT may raise KeyboardInterrupt while a study optimises (module docstring)."""

    def __init__(self) -> None:
        self.open = False  # inside a trial's objective
        self.pending = False  # a SIGINT landed while closed
        self.raised = False  # the one KeyboardInterrupt has been raised
        self.delivered = False  # the trial's objective has seen it (else Python dropped it)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.open and not self.raised:
            self.raised = True
            raise KeyboardInterrupt
        self.pending = not self.raised

    def check(self) -> None:
        """Raise again a KeyboardInterrupt that Python dropped (module docstring); only in the
        main thread, where the objective can record it."""
        in_main_thread = threading.current_thread() is threading.main_thread()
        if self.raised and not self.delivered and self.open and in_main_thread:
            self.delivered = True
            raise KeyboardInterrupt

    def checking(self, callback: Callable[[T], None]) -> Callable[[T], None]:
        """`callback`, after a `check`: an engine's phase and estimate callbacks."""

        def checked(value: T) -> None:
            self.check()
            callback(value)

        return checked

    def raise_pending(self) -> None:
        """KeyboardInterrupt now if a SIGINT waited for this point."""
        if self.pending:
            self.pending = False
            self.raised = True
            raise KeyboardInterrupt

    @contextmanager
    def during_optimize(self) -> Iterator[InterruptGate]:
        # Signal handlers belong to the main thread; elsewhere the gate stays out of the way.
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)
        self.raise_pending()
