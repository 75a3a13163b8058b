"""What each server command is: its engine package, the engine it asked for, the one it ran.

A command may run one of several engines (`Backend.inner_engine`): LMDeploy picks TurboMind
unless told otherwise and falls back to its PyTorch engine with only a log warning; a trial must
record the engine that served it, never the one that was asked for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata

from autotune.backends import BACKENDS

# Every supported server runs on uvicorn, which prints the address it really bound.
_UVICORN_BOUND = re.compile(r"Uvicorn running on https?://[^\s:]+:(\d+)")


@dataclass(frozen=True)
class EngineCheck:
    requested: str
    actual: str

    @property
    def fell_back(self) -> bool:
        return self.requested != self.actual


def _flag(argv: list[str], *names: str) -> str | None:
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def requested_engine(fmt: str, argv: list[str]) -> str:
    """The engine the command asks for, with each CLI's own default when it does not say."""
    inner = BACKENDS[fmt].inner_engine if fmt in BACKENDS else None
    if inner is None:
        return fmt
    engine = _flag(argv, inner.flag) or inner.default
    return inner.aliases.get(engine, engine)


def check_engine(fmt: str, argv: list[str], log_text: str) -> EngineCheck:
    """The engine asked for and the engine the server log says it runs."""
    requested = requested_engine(fmt, argv)
    actual = requested
    inner = BACKENDS[fmt].inner_engine if fmt in BACKENDS else None
    if inner and inner.fallback_log and re.search(inner.fallback_log, log_text, re.IGNORECASE):
        actual = inner.fallback_to or actual
    return EngineCheck(requested=requested, actual=actual)


def engine_version(fmt: str) -> str:
    """The installed version of the package behind the command, from this environment."""
    package = BACKENDS[fmt].package if fmt in BACKENDS else None
    if package is None:
        return "unknown"
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def install_hint(fmt: str) -> str:
    """The command that installs the engine behind `fmt` (autotune's optional extras)."""
    backend = BACKENDS.get(fmt)
    return (backend.install_hint if backend else None) or "install its engine"


def bound_port_from_log(log_text: str) -> int | None:
    """The last port uvicorn reports it is serving on, if it has said so yet."""
    ports = _UVICORN_BOUND.findall(log_text)
    return int(ports[-1]) if ports else None
