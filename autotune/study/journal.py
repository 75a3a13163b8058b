"""The journal file several workers share, read line by line.

Optuna's journal is one JSON record per line. A line that is no Optuna record (an edit,
damage) is refused in one line that names the file and the line, instead of Optuna's
traceback.
"""

from __future__ import annotations

from typing import Any

from optuna.exceptions import OptunaError
from optuna.storages.journal._storage import JournalStorageReplayResult

from autotune.errors import StudyError


class CheckedReplay(JournalStorageReplayResult):
    """Optuna's replay of the journal, refusing a line it cannot apply in one line."""

    path = ""

    def apply_logs(self, logs: Any) -> None:
        lines = iter(logs)
        while True:
            try:
                log = next(lines)
            except StopIteration:
                return
            except ValueError as exc:  # a line that is not JSON, with more lines after it
                # Every line before it was applied: it is the next one.
                raise self._refusal(self.log_number_read + 1, f"not JSON: {exc}") from None
            try:
                super().apply_logs([log])  # counts the line, then applies it
            except (OptunaError, KeyError) as exc:
                if isinstance(log, dict) and log.get("worker_id") == self.worker_id:
                    raise  # this process's own write refused: Optuna's answer, as it is
                raise self._refusal(self.log_number_read, _named(exc)) from None
            except Exception as exc:
                raise self._refusal(self.log_number_read, _named(exc)) from None

    def _refusal(self, line: int, why: str) -> StudyError:
        return StudyError(
            f"journal {self.path}: line {line} is not an Optuna record the study can take "
            f"({why:.200}); the file was edited or damaged: restore it from a copy, or remove "
            "that line"
        )


def _named(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def checked_replay(replay: JournalStorageReplayResult, path: str) -> CheckedReplay:
    """`replay` as a CheckedReplay (the same state), reporting lines of the file at `path`."""
    if isinstance(replay, CheckedReplay):
        return replay
    checked = CheckedReplay.__new__(CheckedReplay)
    checked.__dict__.update(replay.__dict__)
    checked.path = path
    return checked
