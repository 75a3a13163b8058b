"""Whether a trial's export to a deploy target reproduces what the trial measured.

A recommendation must be a command that, launched as printed, gives the recorded figures: the
same engine, the same flags, the same request fields. That holds for a trial measured through
the target's own server command. It also holds for an in-process transformers trial exported
to `swift deploy`, which serves the same transformers model with the same image preprocessing,
when no lever was set off its default where the lever table says what that did in-process
that the command does not do again (Lever.what_if: compiled, sampled, quantised on load, cached
vision embeddings): tests/export/test_swift_reproduces.py launches the export and compares the
answers item by item.
Every other trial is a what-if, shown apart with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.backends import BACKENDS
from autotune.params import LEVER_TABLE, SERVER_BACKENDS
from autotune.records.stored import TrialRecord

COMMANDS = {
    name: backend.deploy_command for name, backend in BACKENDS.items() if backend.deploy_command
}


@dataclass(frozen=True)
class Reproduction:
    deployable: bool
    reason: str


def measured_via(record: TrialRecord) -> str:
    """ "server:<format>", "inprocess" or "endpoint", from a trial's recorded environment."""
    env, backend = record.environment, record.backend
    if env.runner == "endpoint":
        return "endpoint"
    if env.runner == "server" or (env.runner is None and backend in SERVER_BACKENDS):
        return f"server:{env.server_format or backend}"
    return "inprocess"


def reproduction(record: TrialRecord, target: str | None) -> Reproduction:
    """Whether the trial `record` reproduces on `target` (None: an endpoint study, whose
    trials are request settings for that very server)."""
    via = measured_via(record)
    if target is None or via == "endpoint":
        return Reproduction(True, "measured on the endpoint itself")
    if via.startswith("server:"):
        fmt = via.removeprefix("server:")
        if fmt == target:
            return Reproduction(True, f"measured through this very `{COMMANDS[target]}` command")
        return Reproduction(
            False, f"measured through `{COMMANDS.get(fmt, fmt)}`, not the deploy target {target}"
        )
    config = record.trial_config()
    if config.backend not in BACKENDS[target].deploys:
        return Reproduction(
            False,
            f"measured in-process with {config.backend}; `{COMMANDS[target]}` runs another engine",
        )
    what_if = what_if_reason(config.model_dump(), target)
    if what_if is not None:
        return Reproduction(False, what_if)
    return Reproduction(
        True,
        "measured in-process; swift deploy serves the same transformers model with the same "
        "image preprocessing (its HTTP overhead was not part of the measurement)",
    )


def what_ifs(config: dict[str, Any], target: str) -> list[tuple[str, str]]:
    """(lever, why) for each lever of an in-process trial's configuration, in the table's
    order, set off its default where the lever says what that did in-process (Lever.what_if)
    and `target`'s command does not do again, with why the target has no such parameter where
    it has none."""
    found = []
    for lever in LEVER_TABLE:
        value = config.get(lever.name, lever.default)
        if lever.what_if is None or value == lever.default:
            continue
        what = lever.what_if.format(value=value)
        why = lever.lacked_by.get(target)
        found.append((lever.name, what if why is None else f"{what}: {why}"))
    return found


def what_if_reason(config: dict[str, Any], target: str) -> str | None:
    """The first of `what_ifs`; None: the trial is what `target`'s command serves."""
    found = what_ifs(config, target)
    return found[0][1] if found else None
