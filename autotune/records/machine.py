"""The machine a trial was measured on, and the comparison group it belongs to.

A figure is a configuration's on one kind of machine: the same command gives other tokens per
second on an H200 than on an H100, on another host CPU (image decoding, the server's Python
loop) or under another engine version. Each trial records the machine of the run that measured
it (`machine`, written as it starts): its GPU kind, its host CPU and cores, the versions of the
engines it may run, and the comparison group those make. Only trials of one group are ranked
together or raced against each other (autotune.study.results.groups).

A trial stored before machines were recorded has none; what its environment says (the GPUs,
torch's and the engine's versions) is read instead (`recorded_machine`), so an old study
resumed elsewhere is still caught. Fields a side does not know are not compared.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from autotune.backends import BACKENDS
from autotune.records.parts import Environment, _Part

# The group of trials stored before machines were recorded (their machine read from their
# environment).
EARLIER_GROUP = "recorded-before-machines"
# What a machine without GPUs runs on, in the words that name it.
NO_GPU = "CPU only"
# Versions a trial's environment recorded before machines were, by package.
_ENVIRONMENT_VERSIONS = {"torch_version": "torch", "transformers_version": "transformers"}
_SHOWN_VERSIONS = 4


class Machine(_Part):
    """What a run measured on; `group` names the comparison group (a hash of the rest)."""

    group: str | None = None
    gpu: str | None = None  # the GPU kinds the run used ("NVIDIA H100 80GB HBM3"), or NO_GPU
    cpu: str | None = None  # the host CPU's model name
    cores: int | None = None  # the cores the run may use
    versions: dict[str, str] = Field(default_factory=dict)  # package -> version
    endpoint: str | None = None  # a study of an endpoint: the server measured, not this host

    @classmethod
    def grouped(cls, **fields: Any) -> Machine:
        """The machine of `fields`, its group named by what it is."""
        text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return cls.of({**fields, "group": hashlib.sha256(text.encode()).hexdigest()[:10]})

    def hardware(self) -> str:
        """'NVIDIA H100 80GB HBM3 (host: AMD EPYC 7R13, 16 cores)'."""
        if self.endpoint is not None:
            return f"the endpoint {self.endpoint}"
        host = ", ".join(
            part
            for part in (self.cpu, f"{self.cores} cores" if self.cores is not None else None)
            if part
        )
        return f"{self.gpu or 'an unrecorded GPU'}" + (f" (host: {host})" if host else "")

    def words(self, versions: list[str] | None = None) -> str:
        """The hardware, then the `versions` named (all when None, the first few)."""
        names = sorted(self.versions) if versions is None else versions
        shown = [f"{name} {self.versions.get(name, '?')}" for name in names[:_SHOWN_VERSIONS]]
        more = len(names) - _SHOWN_VERSIONS
        listed = ", ".join(shown) + (f" and {more} more" if more > 0 else "")
        return self.hardware() + (f" with {listed}" if listed else "")

    def joined(self, group: str) -> Machine:
        """This machine in comparison group `group` (one it matches, stored earlier)."""
        return Machine.of({**self.written(), "group": group})

    def written(self) -> dict[str, Any]:
        """What a trial stores of it."""
        return self.model_dump(mode="json", exclude_none=True)

    def unlike(self, other: Machine) -> list[str]:
        """The fields in which the two differ, where both know them: 'gpu', 'cpu', 'cores',
        'endpoint', and each version by its package name."""
        differ = [
            name
            for name in ("endpoint", "gpu", "cpu", "cores")
            if getattr(self, name) is not None
            and getattr(other, name) is not None
            and getattr(self, name) != getattr(other, name)
        ]
        shared = sorted(set(self.versions) & set(other.versions))
        return differ + [name for name in shared if self.versions[name] != other.versions[name]]


def known(machine: Machine) -> bool:
    """Whether `machine` says anything to compare (a trial that failed before it measured,
    stored before machines were, says nothing)."""
    return any(value for value in (machine.gpu, machine.cpu, machine.endpoint, machine.versions))


def trial_machine(attrs: Mapping[str, Any]) -> Machine | None:
    """The machine a trial's attributes record, or what its environment and GPUs say (a
    trial stored before machines were; its group is EARLIER_GROUP); None when they say
    nothing. Read leniently: a damaged record still tells its group where it can."""
    recorded = attrs.get("machine")
    if isinstance(recorded, Mapping) and recorded:
        return Machine.of(recorded)
    environment = Environment.of(
        attrs.get("environment") if isinstance(attrs.get("environment"), Mapping) else None
    )
    gpus = attrs.get("gpus") if isinstance(attrs.get("gpus"), list) else []
    extra = environment.model_extra or {}
    if environment.runner == "endpoint":
        return Machine.of({"group": EARLIER_GROUP, "endpoint": environment.endpoint or "?"})
    versions = {
        package: str(extra[key])
        for key, package in _ENVIRONMENT_VERSIONS.items()
        if isinstance(extra.get(key), str)
    }
    backend = BACKENDS.get(environment.server_format or "")
    if backend is not None and backend.package and isinstance(extra.get("engine_version"), str):
        versions[backend.package] = str(extra["engine_version"])
    names = sorted({str(g["name"]) for g in gpus if isinstance(g, Mapping) and g.get("name")})
    gpu = " + ".join(names) or None
    if gpu is None and isinstance(extra.get("gpu_name"), str):
        gpu = str(extra["gpu_name"])
    if gpu is None and extra.get("device") == "cpu":
        gpu = NO_GPU
    machine = Machine.of({"group": EARLIER_GROUP, "gpu": gpu, "versions": versions})
    return machine if known(machine) else None
