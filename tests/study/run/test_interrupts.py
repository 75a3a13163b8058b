"""Ctrl-C lands where a trial can record it (autotune.study.run.interrupts): a SIGINT between two
trials waits for the next one to begin instead of failing, inside Optuna, a trial that has no
reason recorded."""

from __future__ import annotations

import os
import signal
import time

import pytest

from autotune.study.run.interrupts import InterruptGate


def sigint() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)  # the handler runs in the main thread at the next bytecode boundary


def test_a_sigint_between_trials_waits_for_the_next_trial() -> None:
    gate = InterruptGate()
    with pytest.raises(KeyboardInterrupt), gate.during_optimize():
        sigint()  # Optuna asking for a trial, say: nothing is cut short here
        assert gate.pending
        gate.open = True  # the next trial's objective begins, and records it
        with pytest.raises(KeyboardInterrupt):
            gate.raise_pending()
        assert not gate.pending
        raise KeyboardInterrupt  # as the trial re-raises it, through optimize
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_sigint_after_the_last_trial_is_raised_when_optimize_returns() -> None:
    gate = InterruptGate()
    with pytest.raises(KeyboardInterrupt), gate.during_optimize():
        sigint()
    assert not gate.pending
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_only_the_first_sigint_raises_so_its_trial_is_recorded() -> None:
    """A killed coordinator's workers get their parent-death SIGINT once per thread of the
    coordinator: the repeats must not cut short the write that records the interruption."""
    gate = InterruptGate()
    recorded = []
    with pytest.raises(KeyboardInterrupt), gate.during_optimize():
        gate.open = True
        try:
            sigint()
        except KeyboardInterrupt:
            sigint()  # the repeat lands while the trial records why it ended
            recorded.append("interrupted")
            raise
        finally:
            gate.open = False
    assert recorded == ["interrupted"]
