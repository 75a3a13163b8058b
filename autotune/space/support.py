"""What each engine supports for Qwen3-VL, value by value, and why not where it does not.

A space may list quantisation or cache values that only some backends serve. The study never
proposes an unsupported combination (autotune.space.sampling.searched narrows the
choices per backend) and lists each one once, with its reason, in the run's notes.

Each engine's own module (autotune/backends/<name>.py) holds its table, with the versions it
was checked at.
"""

from __future__ import annotations

from typing import Any

from autotune.backends import BACKENDS
from autotune.params import BACKEND_PARAMS, LEVER_TABLE

# Servers whose requests can force an answer's exact length (a minimum number of tokens and
# ignore_eos), so load tests do equal work (each engine's `forces_length`); autotune.export
# renders each one's fields.
LENGTH_FORCING_SERVERS = frozenset(name for name, b in BACKENDS.items() if b.forces_length)


def can_force_length(fmt: str) -> bool:
    return fmt in LENGTH_FORCING_SERVERS


def unsupported_reason(backend: str, name: str, value: Any, *, device: str = "auto") -> str | None:
    """Why `backend` cannot serve Qwen3-VL with `name=value` (on `device`), or None if it can."""
    engine = BACKENDS.get(backend)
    if engine is None:
        return None  # an unknown backend is TrialConfig's to refuse
    reason = engine.unsupported.get(name, {}).get(value)
    if reason is None and device == "cpu":
        reason = engine.cuda_only.get(name, {}).get(value)
    return reason


def supported_choices(backend: str, name: str, choices: list[Any], *, device: str) -> list[Any]:
    """The choices `backend` can serve, in their order."""
    return [v for v in choices if unsupported_reason(backend, name, v, device=device) is None]


# The parameters this module judges (Lever.checked: quantisation and caches), and their plain
# value, the default (which every backend serves).
PLAIN: dict[str, Any] = {lever.name: lever.default for lever in LEVER_TABLE if lever.checked}


def config_problems(values: dict[str, Any], *, device: str = "auto") -> list[str]:
    """One line per value of a configuration its backend cannot serve."""
    backend = str(values.get("backend"))
    problems = []
    for name, plain in PLAIN.items():
        value = values.get(name, plain)
        if value == plain:
            continue
        if name not in BACKEND_PARAMS.get(backend, frozenset()):
            problems.append(f"{name} {value} on {backend}: the {backend} backend has no {name}")
            continue
        reason = unsupported_reason(backend, name, value, device=device)
        if reason is not None:
            problems.append(f"{name} {value} on {backend}: {reason}")
    return problems
