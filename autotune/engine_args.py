"""Extra engine flags from the space file, passed through to the server command verbatim.

Searched knobs are typed parameters (autotune.params); everything else an engine offers
(LMDeploy's --vision-max-batch-size, --enable-prefix-caching, --max-prefill-token-num, ...)
goes under `engine_args`, per export format, and lands in every command autotune starts and
exports. A key that would duplicate a flag autotune renders itself is refused, so a typed
parameter can never be overridden behind the search's back.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, create_model, field_validator

from autotune.backends import BACKENDS, deploy_targets

Scalar = str | int | float | bool
EngineArgValue = Scalar | list[Scalar] | dict[str, Any]

# A flag as engines spell it, with or without its leading dashes: letters, digits, '-', '_' and
# '.' (vLLM's --compilation-config.level). Anything else (`max-num-seqs=256`, a space) would
# carry a second flag or a value past the duplicate check below.
_FLAG_KEY = re.compile(r"-{0,2}[A-Za-z0-9][A-Za-z0-9_.-]*")


def _check_key(key: str) -> None:
    if "=" in key:
        flag, _, value = key.partition("=")
        raise ValueError(
            f"{key!r}: a key is one flag name; give the value as the key's value "
            f"({flag.strip()}: {value.strip() or '...'})"
        )
    if any(char.isspace() for char in key):
        raise ValueError(f"{key!r}: a key is one flag name, without spaces")
    if not _FLAG_KEY.fullmatch(key):
        raise ValueError(
            f"{key!r} is not a flag name (letters, digits, '-', '_' and '.'); give the value "
            "as the key's value"
        )


def _check_value(key: str, value: EngineArgValue) -> None:
    """A string value that starts with -- would be read by the engine as a flag of its own."""
    words = value if isinstance(value, list) else [value]
    for word in words:
        if isinstance(word, str) and word.lstrip().startswith("--"):
            raise ValueError(
                f"{key}: the value {word!r} looks like a flag; give each flag as its own key"
            )


def flag_name(fmt: str, key: str) -> str:
    """The engine's own spelling (`Backend.flag_separator`): LMDeploy/vLLM use dashes, ms-swift
    underscores."""
    bare = key.strip().lstrip("-")
    separator = BACKENDS[fmt].flag_separator
    return bare.replace("_" if separator == "-" else "-", separator)


def _value_words(fmt: str, value: EngineArgValue) -> list[str] | None:
    """The words after `--flag`; [] for a bare switch, None to leave the flag out."""
    if isinstance(value, bool):
        if BACKENDS[fmt].boolean_values:  # a dataclass parser (ms-swift) takes true/false
            return [str(value).lower()]
        return [] if value else None  # store_true switches: false is the default
    if isinstance(value, dict):
        # JSON without spaces, as engine flags take it (--hf-overrides, --compilation-config).
        return [json.dumps(value, separators=(",", ":"))]
    if isinstance(value, list):
        return [str(item).lower() if isinstance(item, bool) else str(item) for item in value]
    return [str(value)]


def render_flags(fmt: str, args: dict[str, EngineArgValue]) -> list[str]:
    """argv words for `args` (already validated for `fmt`), in the order given."""
    words: list[str] = []
    for key, value in args.items():
        rendered = _value_words(fmt, value)
        if rendered is not None:
            words += [f"--{flag_name(fmt, key)}", *rendered]
    return words


class _EngineArgsBase(BaseModel):
    """Extra flags per export format, e.g. `lmdeploy: {vision-max-batch-size: 16}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="after")
    @classmethod
    def _normalise_and_refuse_duplicates(
        cls, args: dict[str, EngineArgValue], info: ValidationInfo
    ) -> dict[str, EngineArgValue]:
        fmt = str(info.field_name)
        reserved = BACKENDS[fmt].reserved_flags
        normalised: dict[str, EngineArgValue] = {}
        for key, value in args.items():
            if not key.strip("- "):
                raise ValueError("empty flag name")
            _check_key(key)
            _check_value(key, value)
            name = flag_name(fmt, key)
            if name in reserved:
                raise ValueError(
                    f"{key}: autotune sets --{name} itself from {reserved[name]}; "
                    "remove it from engine_args"
                )
            if name in normalised:
                raise ValueError(f"{key}: --{name} is given twice")
            normalised[name] = value
        return normalised

    def for_format(self, fmt: str) -> dict[str, EngineArgValue]:
        """The flags for one export format ({} for yaml and formats without extras)."""
        return dict(getattr(self, fmt, {}) or {})


# One field per deploy target of the registry, so an engine added there takes engine_args too.
EngineArgs = create_model(
    "EngineArgs",
    __base__=_EngineArgsBase,
    __doc__=_EngineArgsBase.__doc__,
    **{
        name: (
            dict[str, EngineArgValue],
            Field(
                default_factory=dict,
                description=f"Extra `{BACKENDS[name].deploy_command}` flags.",
            ),
        )
        for name in deploy_targets()
    },
)
