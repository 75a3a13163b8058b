"""Every AUTOTUNE_* environment variable autotune reads: its name, what it takes, its default
and what it means, declared once here and read through `read` alone.

One rule for all of them: unset or empty is the default; anything else is validated as the
variable's type and range (pydantic, from the text) and is either taken whole or refused in
one VariableError line that names the variable, the value, what it takes and how to fix it.
Nothing is clamped or silently replaced by the default: a grace period of `nan` or a busy
timeout of -1 was a mistake the user should hear of. `autotune` checks every variable before
a command runs (autotune.cli.base), so a bad one stops it before anything is written; a reader
elsewhere (a worker, a tool) gets the same line. The README's table is `markdown_table()`
(tests/test_variables.py holds them equal).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, TypeAdapter, ValidationError

from autotune.errors import VariableError

# More fake GPUs than any host has: a test hook that would start a worker for each.
MAX_FAKE_GPUS = 64
MAX_TEXT = 255  # a host name's longest (RFC 1035); a token is far shorter


def _printable(text: str) -> str:
    if not text.isprintable():
        raise ValueError("it holds a control character")
    return text


def _folder(text: str) -> str:
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path} exists and is not a folder")
    return text


def _fake_gpus(text: str) -> str:
    """A count of identical fakes, or NAME[@MHZ] entries, one per fake GPU."""
    if text.isascii() and text.isdigit():
        if int(text) > MAX_FAKE_GPUS:
            raise ValueError(f"at most {MAX_FAKE_GPUS} fake GPUs")
        return text
    entries = [part.strip() for part in text.split(",")]
    if len(entries) > MAX_FAKE_GPUS:
        raise ValueError(f"at most {MAX_FAKE_GPUS} fake GPUs")
    for entry in entries:
        name, at, clock = entry.partition("@")
        if not name.strip() or not name.isprintable():
            raise ValueError(f"{entry!r} names no GPU")
        if at and not (clock.isascii() and clock.isdigit() and 0 < int(clock) <= 10_000):
            raise ValueError(f"{entry!r}: the clock after '@' is MHz from 1 to 10000")
    return text


Seconds = Annotated[float, Field(allow_inf_nan=False)]
Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT), AfterValidator(_printable)]


@dataclass(frozen=True)
class Variable:
    """One environment variable: `kind` is what pydantic validates its text as."""

    name: str
    kind: Any
    default: Any
    takes: str  # what it takes, in words: the README's and the error's
    example: str
    meaning: str
    set_by_autotune: bool = False  # autotune sets it for its own child processes
    _adapter: TypeAdapter[Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_adapter", TypeAdapter(self.kind))

    def read(self) -> Any:
        text = os.environ.get(self.name, "")
        if not text.strip():
            return self.default
        try:
            return self._adapter.validate_python(text.strip())
        except ValidationError as exc:
            error = exc.errors()[0]
            why = str(error["ctx"]["error"]) if "error" in error.get("ctx", {}) else error["msg"]
            raise VariableError(
                f"{self.name}={text[:60]!r} is refused ({why[0].lower()}{why[1:]}): it takes "
                f"{self.takes}; set it to one (e.g. {self.example}) or unset it"
            ) from None


def _seconds(low: float, high: float) -> Any:
    return Annotated[Seconds, Field(ge=low, le=high)]


def _whole(low: int, high: int) -> Any:
    return Annotated[int, Field(ge=low, le=high)]


VARIABLES: dict[str, Variable] = {
    v.name: v
    for v in [
        Variable(
            "AUTOTUNE_SQLITE_BUSY_TIMEOUT_S",
            _seconds(0.1, 86_400),
            30.0,
            "seconds from 0.1 to 86400",
            "30",
            "How long a write to a SQLite study waits for another writer's lock, before its "
            "retries with backoff.",
        ),
        Variable(
            "AUTOTUNE_HEARTBEAT_GRACE_S",
            _whole(2, 86_400),
            120,
            "whole seconds from 2 to 86400",
            "120",
            "How long a trial's process may send no heartbeat before another run or host fails "
            "it (Optuna's grace period, a whole number of seconds).",
        ),
        Variable(
            "AUTOTUNE_HOST",
            Text,
            None,
            f"printable text of 1 to {MAX_TEXT} characters",
            "node-3",
            "This host's name in trial owners (default: the machine's host name); set it where "
            "host names repeat (containers of one image).",
        ),
        Variable(
            "AUTOTUNE_DUMMY_DIR",
            Annotated[Text, AfterValidator(_folder)],
            None,
            "a folder, or a path where one can be made",
            "/tmp/autotune-dummy",
            "Where --dummy-weights keeps its random-weight checkpoints (default "
            "studies/dummy-checkpoints in the repository).",
        ),
        Variable(
            "AUTOTUNE_NO_PLUGINS",
            bool,
            False,
            "1 or 0 (true/false, yes/no)",
            "1",
            "Load no engine plugin (autotune --help and --version never do).",
        ),
        Variable(
            "AUTOTUNE_FAKE_GPUS",
            Annotated[str, AfterValidator(_fake_gpus)],
            None,
            f"a count up to {MAX_FAKE_GPUS}, or NAME[@MHZ] entries separated by commas",
            "'NVIDIA H200@1980,NVIDIA H200'",
            "Tests only: fake GPUs in place of NVML's, so GPU scheduling runs on a CPU host.",
        ),
        Variable(
            "AUTOTUNE_POOLS_FILE",
            Annotated[str, AfterValidator(_printable)],
            None,
            "a path to a pools file (JSON)",
            "/data/pools.json",
            "The evaluation pools file read in place of evalsets/pools.json.",
        ),
        Variable(
            "AUTOTUNE_POOLS_DIR",
            Annotated[str, AfterValidator(_folder)],
            None,
            "a folder, or a path where one can be made",
            "/data/evalsets",
            "Where evaluation pools are built, in place of studies/evalsets/.",
        ),
        Variable(
            "AUTOTUNE_ENGINES_AT_ONCE",
            _whole(1, 1024),
            1,
            "a whole number from 1 to 1024",
            "2",
            "How many engines a run keeps at once (its workers' CPU thread share).",
            set_by_autotune=True,
        ),
        Variable(
            "AUTOTUNE_PLUGIN_PROBE",
            bool,
            False,
            "1 or 0 (true/false, yes/no)",
            "1",
            "Marks the child process that tries each engine plugin's import.",
            set_by_autotune=True,
        ),
        Variable(
            "AUTOTUNE_GUARD_PARENT",
            _whole(1, 2**31 - 1),
            None,
            "a process id from 1 to 2147483647",
            "4242",
            "The process an engine's guard dies with (default: the guard's parent).",
            set_by_autotune=True,
        ),
        Variable(
            "AUTOTUNE_GROUP_TOKEN",
            Annotated[Text, Field(pattern=r"^[0-9a-f]+$", max_length=64)],
            None,
            "up to 64 lower-case hexadecimal digits",
            "3f9a",
            "Marks an engine's processes as this run's, so only they are ever stopped.",
            set_by_autotune=True,
        ),
    ]
}


def read(name: str) -> Any:
    """The value of variable `name` (its default when unset or empty); VariableError when it
    holds what the variable does not take."""
    return VARIABLES[name].read()


def check_all() -> None:
    """Read every variable: the first that holds what it does not take is one line."""
    for variable in VARIABLES.values():
        variable.read()


def markdown_table() -> str:
    """The README's table of the variables."""

    def escape(text: str) -> str:
        return text.replace("|", "\\|")

    rows = ["| variable | takes | default | meaning |", "| --- | --- | --- | --- |"]
    for v in VARIABLES.values():
        default = "unset" if v.default is None else f"{v.default:g}"  # a bool is 1 or 0
        who = " Set by autotune for its child processes." if v.set_by_autotune else ""
        rows.append(f"| `{v.name}` | {escape(v.takes)} | {default} | {escape(v.meaning)}{who} |")
    return "\n".join(rows)
