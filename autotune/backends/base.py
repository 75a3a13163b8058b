"""What autotune knows about one engine, in one place: the facts every layer above reads.

Each engine's module (autotune/backends/<name>.py) holds one `Backend`; the registry
(autotune.backends) lists them. The parameters it lacks, what it supports for Qwen3-VL value
by value, availability checks, the deploy command and its reserved flags, the package that
provides it, LoRA adapters, whether load tests can force answer lengths and the start-up guess
of the budget all come from here, so adding an engine starts with one module and one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Backend:
    """One engine autotune can measure, and how it is served."""

    name: str
    # The searched parameters this engine has no use for: never proposed for it, so a trial
    # never records a knob that had no effect (autotune.params.BACKEND_PARAMS).
    lacks: frozenset[str]
    # Seconds its first launch is guessed to take before a study has timed one
    # (autotune.study.budget).
    startup_guess_s: float
    # Measured through a server process (else in-process, in autotune's worker).
    server: bool = False
    # The command `autotune export` prints for it as a deploy target; None: not a target.
    deploy_command: str | None = None
    # The backends whose trials this target reproduces, itself included.
    deploys: frozenset[str] = frozenset()
    # The distribution that provides the command, the module and program that show it is
    # installed, and the line that installs it.
    package: str | None = None
    module: str | None = None
    program: str | None = None
    install_hint: str | None = None
    # Its requests can force an answer's exact length (a minimum of tokens and ignore_eos), so
    # load tests do equal work; autotune.export renders the fields.
    forces_length: bool = False
    # The flags its command sets from a typed parameter or a serve option -> what sets them:
    # a space's engine_args may not set them again (autotune.engine_args).
    reserved_flags: Mapping[str, str] = field(default_factory=dict)
    # Its context-length flag: set by engine_args or by the session_len serve option, not both.
    session_len_flag: str | None = None
    # parameter -> {value it cannot serve for Qwen3-VL: why}; a value not listed is supported
    # (autotune.space.support).
    unsupported: Mapping[str, Mapping[Any, str]] = field(default_factory=dict)
    # parameter -> {value that needs a CUDA GPU: why}.
    cuda_only: Mapping[str, Mapping[Any, str]] = field(default_factory=dict)
    # Why it cannot serve a LoRA adapter of Qwen3-VL; None: it can.
    adapters_refused: str | None = None
