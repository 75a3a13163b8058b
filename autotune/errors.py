"""The exceptions autotune raises for problems a user can fix.

Every one of them is printed by the CLI as a single line (no traceback) with a non-zero exit.
A message says what is wrong and how to fix it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, options: Iterable[str]) -> str:
    """ "did you mean 'x'? " for the closest option, or "" when none is close."""
    close = difflib.get_close_matches(name, list(options), n=1)
    return f"did you mean '{close[0]}'? " if close else ""


class AutotuneError(Exception):
    """A problem the user can fix; the CLI prints it as one line and exits with status 2."""

    exit_code = 2


class SpaceError(AutotuneError):
    """A search-space file is missing, malformed or asks for values that are not allowed."""


class EvalsetError(AutotuneError):
    """An evaluation set is missing, malformed or points to an unreadable image."""


class ModelError(AutotuneError):
    """The model cannot be found, reached or is not a Qwen3-VL-style image-text model."""


class StudyError(AutotuneError):
    """The study or its storage is missing, empty or not an autotune study."""


class ExportError(AutotuneError):
    """A configuration cannot be rendered as the requested deploy command."""


class VariableError(AutotuneError):
    """An AUTOTUNE_* environment variable holds a value it does not take (autotune.variables)."""


class TrialFailure(Exception):
    """A trial failed for a reason worth recording (crash, out of memory, time-out, bad server).

    Not an AutotuneError: it fails one trial, and the study goes on.
    """

    def __init__(self, reason: str, *, kind: str = "error", log_tail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind
        self.log_tail = log_tail
