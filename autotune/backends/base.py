"""What autotune knows about one engine, in one place: the facts every layer above reads.

Each engine's module (autotune/backends/<name>.py) holds one `Backend`; the registry
(autotune.backends) lists them. What it supports for Qwen3-VL value by value, availability
checks, the deploy command, its renderer, its flags' spelling and reserved names, the engine a
command really ran, the package that provides it, LoRA adapters, the request fields that force
answer lengths and the start-up guess of the budget all come from here: adding an engine is one
module and one registry line (autotune.backends). Which parameters a built-in engine lacks, and
why, is declared with each parameter (autotune.params.LEVER_TABLE).

A built-in engine's module spells each of its command's flags once, in a `FlagTable` (FLAGS);
its renderer, its reserved flags and the inner-engine check all read that table. A flag bound
to a parameter (`Flag(..., lever=name)`) is rendered from its value by every renderer alike.

The renderer is named, not imported ("module:function"): it builds on the trial configuration
and the export layer, which sit above this one; autotune.export resolves it when it renders.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Flag:
    """One flag of an engine's command line, spelled here and nowhere else.

    The renderer builds its argv words from it (`FLAGS.dtype("bfloat16")` is
    `["--dtype", "bfloat16"]`), and a flag that something autotune controls sets is reserved:
    a space's engine_args may not set it again (`Backend.reserved_flags`).
    """

    # As the engine spells it, without the dashes: `max-batch-size`, or `max_batch_size`.
    name: str
    # What sets it, as the refusal of an engine_args key names it; None: engine_args may set it
    # (unless it is bound to a lever, which sets it).
    set_by: str | None = None
    # The searched parameter whose value it carries, where a renderer passes that value
    # through as it is (autotune.export.base.lever_flags): the flag, with the value, wherever
    # it is not the parameter's default; true is a bare switch.
    lever: str | None = None

    @property
    def owner(self) -> str | None:
        """What sets it: its set_by, or the parameter it is bound to; None: engine_args may."""
        if self.set_by is None and self.lever is not None:
            return f"the {self.lever} parameter"
        return self.set_by

    @property
    def option(self) -> str:
        """The flag as a command line spells it: `--max-batch-size`."""
        return f"--{self.name}"

    def __call__(self, *values: object) -> list[str]:
        """The flag and its values as argv words; no value: a bare switch."""
        return [self.option, *(str(value) for value in values)]


class FlagTable:
    """An engine's flags, one class attribute (a `Flag`) each, in the order its reserved names
    are listed and its lever-bound flags are rendered."""

    def __iter__(self) -> Iterator[Flag]:
        return (value for value in vars(type(self)).values() if isinstance(value, Flag))

    def reserved(self) -> dict[str, str]:
        """Flag name -> what sets it, for the flags a space's engine_args may not set."""
        return {flag.name: flag.owner for flag in self if flag.owner is not None}


@dataclass(frozen=True)
class InnerEngine:
    """A command that runs one of several engines, chosen by one of its flags."""

    # The flag that picks it, and what the command runs without it.
    flag: str
    default: str
    # Other spellings of an engine -> its name (ms-swift's deprecated `pt`).
    aliases: Mapping[str, str] = field(default_factory=dict)
    # A log line (regular expression) that says the command fell back to another engine, and
    # that engine: a trial records the engine that served it, never the one asked for.
    fallback_log: str | None = None
    fallback_to: str | None = None


# Keyword-only: `lacks` keeps its place (second, as a plugin's fields are read) with a default.
@dataclass(frozen=True, kw_only=True)
class Backend:
    """One engine autotune can measure, and how it is served."""

    name: str
    # The searched parameters this engine has no use for beyond those the lever table says
    # it lacks (a plugin's own; autotune.params.lacks): never proposed for it, so a trial
    # never records a knob that had no effect.
    lacks: frozenset[str] = frozenset()
    # Seconds its first launch is guessed to take before a study has timed one
    # (autotune.study.run.budget).
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
    # "module:function" that renders a configuration as its deploy command:
    # render(config: TrialConfig, opts: autotune.export.ServeOptions) -> autotune.export.Export.
    renderer: str | None = None
    # The request fields that, set to N with ignore_eos, make it answer exactly N tokens, so
    # load tests do equal work; () when its requests cannot force a length.
    length_fields: tuple[str, ...] = ()
    # How its command line spells a flag: `--max-batch-size` ("-") or `--max_batch_size`
    # ("_"); and whether a boolean flag takes a value (`--stream false`) or is a bare switch.
    flag_separator: str = "-"
    boolean_values: bool = False
    # The engine inside its command, when the command can run several; None: itself.
    inner_engine: InnerEngine | None = None
    # It serves a quantised weight_quant layout from that layout's own checkpoint (a space's
    # quantized_checkpoints) rather than quantising on load.
    loads_quantized_checkpoints: bool = False
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
    # Its KV cache takes a share of the GPU memory free when it starts, so it can start while
    # another engine (a study's reference) still holds some (autotune.study.run.launches).
    sizes_cache_from_free_memory: bool = False
    # As a deploy target: the label of its own defaults measured as a baseline ("LMDeploy's
    # defaults"), and the TrialConfig values those defaults amount to where they differ from
    # TrialConfig's (vLLM caches prefixes by default): the record then says what ran.
    defaults_label: str | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)

    @property
    def forces_length(self) -> bool:
        """Its requests can force an answer's exact length."""
        return bool(self.length_fields)
