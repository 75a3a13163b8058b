"""This machine, as a study compares machines (autotune.records.machine): the GPU kinds a run
uses, the host CPU and the cores the run may use, and the versions of the packages its engines
run on.

Read without importing torch or an engine (package metadata, /proc/cpuinfo, NVML through
autotune.engines.gpus), so a resume is checked in milliseconds, before anything starts. The
versions are those of torch, transformers and the package behind each engine the space may
launch: another engine release, not another autotune, moves a figure.
"""

from __future__ import annotations

import os
import platform
from importlib import metadata

from autotune.backends import BACKENDS
from autotune.engines.gpus import Gpu
from autotune.records.machine import NO_GPU, Machine
from autotune.space import SearchSpace

CPUINFO = "/proc/cpuinfo"
NOT_INSTALLED = "not installed"
# Every engine runs on these (the in-process one directly, the servers under their own).
_LIBRARIES = ("torch", "transformers")


def cpu_model() -> str:
    """The host CPU's model name ('AMD EPYC 7R13 Processor'); the architecture where the
    kernel does not say (some ARM hosts)."""
    try:
        with open(CPUINFO, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                    return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def usable_cores() -> int:
    """The cores this process may run on (its affinity), which its engines share."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return NOT_INSTALLED


def engine_packages(space: SearchSpace) -> list[str]:
    """The packages behind every engine `space` may launch or deploy with, and the libraries
    they all run on."""
    backends = {space.deploy, space.reference_config().backend}
    backends |= {space.candidate_config(c.name).backend for c in space.candidates}
    searched = space.params.get("backend")
    if searched is not None and searched.choices:
        backends |= {str(choice) for choice in searched.choices}
    packages = {BACKENDS[b].package for b in backends if b in BACKENDS}
    return sorted({*_LIBRARIES, *(p for p in packages if p)})


def this_machine(gpus: list[Gpu], packages: list[str], *, endpoint: str | None = None) -> Machine:
    """The machine a run on `gpus` (none: the CPU) measures on, with the versions of
    `packages` (engine_packages); for an endpoint, the server it measures, which runs
    wherever it runs."""
    if endpoint is not None:
        return Machine.grouped(endpoint=endpoint)
    kinds = sorted({gpu.name for gpu in gpus})
    return Machine.grouped(
        gpu=" + ".join(kinds) or NO_GPU,
        cpu=cpu_model(),
        cores=usable_cores(),
        versions={package: version(package) for package in packages},
    )
