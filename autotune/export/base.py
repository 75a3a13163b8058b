"""What an export is: a command, its environment, and what it cannot say.

Every target module builds one `Export`. The server runner launches `argv` with `env` exactly as
rendered, so a trial measures the very command a user later pastes.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field, replace
from typing import Any

from ..backends import Flag, FlagTable
from ..checkpoints.adapters import Adapter
from ..checkpoints.geometry import ImageGeometry
from ..params import LEVER_BY_NAME, TrialConfig


@dataclass(frozen=True)
class ServeOptions:
    """Where and how the server listens; the same for every target."""

    model: str
    host: str = "0.0.0.0"
    port: int | None = None
    served_model_name: str | None = None
    session_len: int | None = None
    # Extra flags for this format, validated (autotune.engine_args); rendered after ours.
    engine_args: dict[str, Any] = field(default_factory=dict)
    # The checkpoint processor's image grid and pixel bounds, pinned where an engine has its
    # own defaults (ms-swift).
    image_geometry: ImageGeometry = field(default_factory=ImageGeometry)
    # LoRA adapters served on the model (autotune.checkpoints.adapters); requests name the
    # first one.
    adapters: tuple[Adapter, ...] = ()
    # Checkpoints of the model in a quantised layout, by weight_quant value ({"fp8": id}).
    quantized_models: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Export:
    """A configuration rendered for one deploy target.

    Attributes:
        format: The target name (one of `autotune.export.FORMATS`).
        argv: The command to run, program first; empty for a document-only format.
        env: Environment variables the command needs.
        notes: Everything the reader must know: what a client must do, and the blockers.
        blockers: The notes that make the command differ from what the trial measured, one
            sentence each (`--strict` refuses the export and lists exactly these).
        request: Chat-completions body fields that reproduce the measured decoding.
        document: The rendered file body for a document-only format (yaml), else "".
    """

    format: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)
    request: dict[str, Any] = field(default_factory=dict)
    document: str = ""

    @property
    def exact(self) -> bool:
        """Whether running the command is what the trial measured."""
        return not self.blockers

    def blocked(self, reason: str) -> Export:
        """This export with one more blocker, printed first."""
        return replace(self, notes=[reason, *self.notes], blockers=[reason, *self.blockers])

    @property
    def command(self) -> str:
        """The command line alone: `KEY=value ... program args`, shell-quoted."""
        assignments = [f"{key}={shlex.quote(value)}" for key, value in self.env.items()]
        return " ".join([*assignments, shlex.join(self.argv)]) if self.argv else ""

    @property
    def text(self) -> str:
        """Ready-to-paste text: notes as `# note:` comments, then the command or document.

        No trailing newline, so `print` / `click.echo` end it with exactly one.

        The command stays on one line: shell comments and a single quoted line survive a paste
        into any POSIX shell, and `shlex.split` reads it back unchanged.
        """
        lines = [_comment(note) for note in self.notes]
        if self.argv:
            lines.append(self.command)
        if self.document:
            lines.append(self.document.rstrip("\n"))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (what `autotune export --json` prints)."""
        return {
            "format": self.format,
            "argv": list(self.argv),
            "env": dict(self.env),
            "notes": list(self.notes),
            "blockers": list(self.blockers),
            "exact": self.exact,
            "request": dict(self.request),
            "command": self.command,
            "document": self.document,
        }


@dataclass
class Notes:
    """The notes a target module collects while it renders, and which of them block."""

    notes: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)

    def add(self, *notes: str) -> None:
        self.notes.extend(notes)

    def block(self, reason: str) -> None:
        """A note saying how the command differs from what the trial measured."""
        self.notes.append(reason)
        self.blockers.append(reason)


def _comment(note: str) -> str:
    # A newline inside a note would end the comment and leave shell code behind it.
    first, *rest = note.splitlines() or [""]
    return "\n".join([f"# note: {first}", *(f"#   {line}" for line in rest)])


def image_note(image_max_side: int) -> str:
    """The client-side half of the configuration, which no server flag can express."""
    return (
        f"autotune resized every image client-side to longest side {image_max_side} px "
        "(Pillow, LANCZOS) before sending it: resize the same way in your client, or the "
        "server sees larger images than were measured."
    )


def batch_cap(config: TrialConfig) -> int:
    """The server's cap on batched requests: its launch value, or for a trial measured
    in-process (which has none) the static batch it ran."""
    return config.max_batch_size if config.max_batch_size is not None else config.batch_size


def client_note(config: TrialConfig) -> str:
    if config.engine_defaults:
        return (
            f"measured with {config.batch_size} request(s) in flight; the engine caps the "
            "batch at its own default."
        )
    return (
        f"measured with {config.batch_size} request(s) in flight; the launch caps the batch at "
        f"{batch_cap(config)}."
    )


def defaults_note(command: str) -> str:
    """What an export of the engine's defaults is (TrialConfig.engine_defaults)."""
    return (
        f"the engine's defaults: `{command}` as its documentation starts it, with no launch "
        "flag of autotune's (the study's baseline)."
    )


def compact_json(value: Any) -> str:
    """JSON without spaces, as engine flags take it (stable and easy to read in a command)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=False)


def backend_note(config: TrialConfig, *, target: str, native: str) -> str | None:
    """A note when the trial ran on another backend than the one this command starts."""
    if config.backend == native:
        return None
    return (
        f"measured with backend {config.backend!r}; this command serves it with {target}, "
        "whose speed autotune did not measure for this configuration."
    )


def sampling_request(
    config: TrialConfig, *, max_tokens_key: str = "max_tokens", greedy: dict[str, Any]
) -> dict[str, Any]:
    """The OpenAI-style body fields that reproduce the trial's decoding.

    `greedy` is the target's own spelling of greedy decoding (temperature 0, or top_k 1). A
    sampling knob left as None is omitted so the server falls back to the checkpoint's
    generation_config, as the in-process trial did.
    """
    body: dict[str, Any] = {max_tokens_key: config.max_new_tokens}
    if config.do_sample:
        for name in ("temperature", "top_k", "top_p"):
            value = getattr(config, name)
            if value is not None:
                body[name] = value
        body["seed"] = config.seed
    else:
        body.update(greedy)
    body["repetition_penalty"] = config.repetition_penalty
    return body


def lever_flags(
    config: TrialConfig, table: FlagTable, *, boolean_values: bool = False
) -> list[str]:
    """The flags of `table` bound to a lever (`Flag.lever`), in the table's order, each where
    the configuration's value is not the lever's default: a new lever reaches every engine's
    command through its flag alone. True is a bare switch, or `--flag true` where the engine's
    booleans take a value (`boolean_values`); false, a default's absence, is not rendered on a
    bare-switch engine (its flag turns on what the default leaves off).
    """
    flags: list[str] = []
    for flag in table:
        if flag.lever is None:
            continue
        value = getattr(config, flag.lever)
        if value == LEVER_BY_NAME[flag.lever].default:
            continue
        if isinstance(value, bool) and not boolean_values:
            flags += flag() if value else []
        else:
            flags += flag(str(value).lower() if isinstance(value, bool) else value)
    return flags


def address_flags(opts: ServeOptions, *, host: Flag, port: Flag, name: Flag) -> list[str]:
    """Bind address, port and served model name, under each engine's own flags."""
    flags = host(opts.host)
    if opts.port is not None:
        flags += port(opts.port)
    if opts.served_model_name is not None:
        flags += name(opts.served_model_name)
    return flags


def engine_knob_notes(config: TrialConfig, *, engine: str, graphs: str, kernels: str) -> list[str]:
    """What a server engine does with the transformers-only knobs it has no flag for."""
    notes = []
    if config.compile_mode not in ("none", "default"):
        notes.append(
            f"compile_mode {config.compile_mode!r} means {graphs} for {engine} (its default); "
            f"{engine} has no per-mode flag."
        )
    if config.attn_implementation != "sdpa":
        notes.append(
            f"attn_implementation {config.attn_implementation!r} has no {engine} flag; {kernels}."
        )
    return notes


def adapter_specs(opts: ServeOptions) -> list[str]:
    """Each adapter as NAME=PATH, the form every engine's flag takes."""
    return [f"{adapter.name}={adapter.path}" for adapter in opts.adapters]


def adapter_notes(opts: ServeOptions) -> list[str]:
    """How a client reaches the adapter the trials measured (nothing without adapters)."""
    if not opts.adapters:
        return []
    return [
        f'requests name the LoRA adapter: "model": "{opts.adapters[0].name}" (autotune '
        "measured that adapter); the base model stays servable under its own name."
    ]
