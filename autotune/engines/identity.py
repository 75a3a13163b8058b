"""What each server command is: its engine package, the engine it asked for, the one it ran.

LMDeploy picks TurboMind unless told otherwise and falls back to its PyTorch engine with only a
log warning; a trial must record the engine that served it, never the one that was asked for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata

from autotune.backends import BACKENDS

# The distribution that provides each export format's command.
ENGINE_PACKAGES: dict[str, str] = {
    name: backend.package for name, backend in BACKENDS.items() if backend.package
}

# lmdeploy/archs.py: "Fallback to pytorch engine because ... not supported by turbomind engine"
# (or "... turbomind engine is not installed correctly").
_LMDEPLOY_FALLBACK = re.compile(r"fall ?back to pytorch engine", re.IGNORECASE)

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
    if fmt == "lmdeploy":
        return _flag(argv, "--backend") or "turbomind"
    if fmt == "swift":
        engine = _flag(argv, "--infer_backend") or "transformers"
        return "transformers" if engine == "pt" else engine  # pt: deprecated alias
    return fmt


def check_engine(fmt: str, argv: list[str], log_text: str) -> EngineCheck:
    """The engine asked for and the engine the server log says it runs."""
    requested = requested_engine(fmt, argv)
    actual = requested
    if fmt == "lmdeploy" and _LMDEPLOY_FALLBACK.search(log_text):
        actual = "pytorch"
    return EngineCheck(requested=requested, actual=actual)


def engine_version(fmt: str) -> str:
    """The installed version of the package behind the command, from this environment."""
    package = ENGINE_PACKAGES.get(fmt)
    if package is None:
        return "unknown"
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def install_hint(fmt: str) -> str:
    """The pip command that installs the engine behind `fmt` (autotune's optional extras)."""
    return f"pip install 'autotune[{fmt}]'" if fmt in ENGINE_PACKAGES else "install its engine"


def bound_port_from_log(log_text: str) -> int | None:
    """The last port uvicorn reports it is serving on, if it has said so yet."""
    ports = _UVICORN_BOUND.findall(log_text)
    return int(ports[-1]) if ports else None
