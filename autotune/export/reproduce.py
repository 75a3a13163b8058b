"""Whether a trial's export to a deploy target reproduces what the trial measured.

A recommendation must be a command that, launched as printed, gives the recorded figures: the
same engine, the same flags, the same request fields. That holds for a trial measured through
the target's own server command. It also holds for an in-process transformers trial exported
to `swift deploy`, which serves the same transformers model with the same image preprocessing,
when the trial neither compiled (no ms-swift flag applies torch.compile), sampled (another
random stream), quantised on load nor cached vision embeddings (no ms-swift flag does either):
tests/export/test_swift_reproduces.py launches the export and compares the answers item by item.
Every other trial is a what-if, shown apart with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.backends import BACKENDS
from autotune.params import SERVER_BACKENDS
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
    if config.compile_mode != "none":
        return Reproduction(
            False,
            f"static cache + torch.compile ({config.compile_mode}): no swift deploy flag "
            "applies torch.compile",
        )
    if config.do_sample:
        return Reproduction(
            False, "sampled in-process: ms-swift's sampler draws other random numbers"
        )
    if config.weight_quant != "none":
        return Reproduction(
            False,
            f"{config.weight_quant} weights quantised in-process (FineGrainedFP8Config): no "
            "swift deploy flag quantises on load",
        )
    if config.prefix_cache:
        return Reproduction(
            False,
            "vision embeddings of repeated images reused in-process: ms-swift's transformers "
            "engine has no such cache",
        )
    return Reproduction(
        True,
        "measured in-process; swift deploy serves the same transformers model with the same "
        "image preprocessing (its HTTP overhead was not part of the measurement)",
    )
