"""Engine plugins, contained: a plugin that fails is skipped with one line naming it.

A plugin is somebody else's code, run inside every autotune command. It may raise at import or
on any attribute read, call sys.exit(3), or end the process outright with os._exit(0), which
no `except` can catch. So:

- its Backend is read once, field by field, inside a `try` that also catches SystemExit, and
  copied into a plain Backend of autotune's own (`plain_backend`): nothing of the plugin's
  object is read again later;
- before any plugin is imported here, a child process (autotune.backends.probe) imports and
  reads each one, renderer included, and says which are sound; one that ends or hangs the
  child is skipped here without being imported at all;
- `autotune --help` and `--version` load no plugin (AUTOTUNE_NO_PLUGINS, set by autotune.cli
  for them; a user may set it too, to run without any plugin).

What is not contained: a plugin that behaves in the child and exits in the parent, or whose
renderer ends the process when it is called (`autotune export` renders in-process). The
renderer's exceptions are contained (autotune.export).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Any

from autotune import variables
from autotune.backends.base import Backend, InnerEngine

PLUGIN_GROUP = "autotune.backends"
NO_PLUGINS_ENV = "AUTOTUNE_NO_PLUGINS"
PROBE_ENV = "AUTOTUNE_PLUGIN_PROBE"
# A plugin's import that takes longer than this in the child is taken for a hang.
PROBE_TIMEOUT_S = 60.0


class PluginProblem(Exception):
    """Why a plugin cannot join the registry (one line)."""


def describe(exc: BaseException) -> str:
    """An exception as one short line, whatever its __str__ does."""
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({_safe_str(exc.code)})"
    return f"{type(exc).__name__}: {_safe_str(exc)}"


def _safe_str(value: object) -> str:
    try:
        text = str(value)
    except Exception:  # a __str__ that raises too
        return "?"
    return " ".join(text.split())[:200]


# --- a plugin's Backend, read once into plain values -------------------------------------


def _text(value: object) -> str:
    if type(value) is not str:
        raise PluginProblem(f"is a {type(value).__name__}, not text")
    return value


def _optional_text(value: object) -> str | None:
    return None if value is None else _text(value)


def _flag(value: object) -> bool:
    if type(value) is not bool:
        raise PluginProblem(f"is a {type(value).__name__}, not True or False")
    return value


def _seconds(value: object) -> float:
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:  # type: ignore[arg-type]
        raise PluginProblem("is not a number of seconds (finite, 0 or more)")
    return float(value)  # type: ignore[arg-type]


def _texts(value: object) -> tuple[str, ...]:
    if not isinstance(value, (frozenset, set, tuple, list)):
        raise PluginProblem(f"is a {type(value).__name__}, not a collection of names")
    return tuple(_text(item) for item in value)


def _text_map(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise PluginProblem(f"is a {type(value).__name__}, not a mapping")
    return {_text(key): _text(item) for key, item in dict(value).items()}


def _why_map(value: object) -> dict[str, dict[Any, str]]:
    """parameter -> {value: why}; a value is a plain scalar."""
    if not isinstance(value, Mapping):
        raise PluginProblem(f"is a {type(value).__name__}, not a mapping")
    result = {}
    for name, whys in dict(value).items():
        if not isinstance(whys, Mapping):
            raise PluginProblem(f"[{_safe_str(name)}] is not a mapping")
        plain = {}
        for key, why in dict(whys).items():
            if type(key) not in (str, int, float, bool, type(None)):
                raise PluginProblem(f"[{_safe_str(name)}] has a key that is not a plain value")
            plain[key] = _text(why)
        result[_text(name)] = plain
    return result


def _inner_engine(value: object) -> InnerEngine | None:
    if value is None:
        return None
    if not isinstance(value, InnerEngine):
        raise PluginProblem(f"is a {type(value).__name__}, not an InnerEngine")
    return InnerEngine(
        flag=_text(value.flag),
        default=_text(value.default),
        aliases=_text_map(value.aliases),
        fallback_log=_optional_text(value.fallback_log),
        fallback_to=_optional_text(value.fallback_to),
    )


def _scalar_map(value: object) -> dict[str, Any]:
    """A mapping of names to plain scalars (a TrialConfig's values), copied."""
    if not isinstance(value, Mapping):
        raise PluginProblem(f"is a {type(value).__name__}, not a mapping")
    plain = {}
    for key, item in dict(value).items():
        if item is not None and not isinstance(item, str | int | float | bool):
            raise PluginProblem(f"has a {type(item).__name__} for {key!r}, not a plain value")
        plain[_text(key)] = item
    return plain


_FIELDS: dict[str, Callable[[object], Any]] = {
    "name": _text,
    "lacks": lambda value: frozenset(_texts(value)),
    "startup_guess_s": _seconds,
    "server": _flag,
    "deploy_command": _optional_text,
    "deploys": lambda value: frozenset(_texts(value)),
    "package": _optional_text,
    "module": _optional_text,
    "program": _optional_text,
    "install_hint": _optional_text,
    "renderer": _optional_text,
    "length_fields": _texts,
    "flag_separator": _text,
    "boolean_values": _flag,
    "inner_engine": _inner_engine,
    "loads_quantized_checkpoints": _flag,
    "reserved_flags": _text_map,
    "session_len_flag": _optional_text,
    "unsupported": _why_map,
    "cuda_only": _why_map,
    "adapters_refused": _optional_text,
    "sizes_cache_from_free_memory": _flag,
    "defaults_label": _optional_text,
    "defaults": _scalar_map,
}


def plain_backend(found: object) -> Backend:
    """A plugin's object read once into a Backend of plain values (PluginProblem if it is
    none). The caller catches what reading it may raise."""
    if not isinstance(found, Backend):
        raise PluginProblem(f"it is a {type(found).__name__}, not an autotune.backends.Backend")
    values = {}
    for field in dataclasses.fields(Backend):
        try:
            values[field.name] = _FIELDS[field.name](getattr(found, field.name))
        except PluginProblem as problem:
            raise PluginProblem(f"its {field.name} {problem}") from None
    return Backend(**values)


def check(backend: Backend, entry_name: str, taken: set[str]) -> None:
    """PluginProblem when a (plain) plugin Backend cannot join the registry."""
    if backend.name != entry_name:
        raise PluginProblem(f"its Backend is named {backend.name!r}; name the entry point the same")
    if backend.name in taken:
        raise PluginProblem(f"an engine named {backend.name!r} is registered already")
    # In-process engines run inside autotune's own worker (autotune.engines.inprocess).
    if not backend.server or not backend.deploy_command or not backend.renderer:
        raise PluginProblem("a plugin engine must be a server with a deploy_command and a renderer")
    if ":" not in backend.renderer:
        raise PluginProblem(f"renderer {backend.renderer!r} is not 'module:function'")
    if backend.flag_separator not in ("-", "_"):
        raise PluginProblem("its flag_separator is neither '-' nor '_'")


def load(entry: metadata.EntryPoint, taken: set[str], *, renderer: bool = False) -> Backend:
    """The entry point's Backend, read and checked (PluginProblem otherwise); with `renderer`,
    its renderer is imported and checked too (the probe does; an export does it later)."""
    try:
        found = entry.load()
    except (Exception, SystemExit) as exc:
        raise PluginProblem(f"it does not import ({describe(exc)})") from None
    try:
        backend = plain_backend(found)
    except PluginProblem:
        raise
    except (Exception, SystemExit) as exc:
        raise PluginProblem(f"reading it failed ({describe(exc)})") from None
    check(backend, entry.name, taken)
    if renderer:
        resolve_renderer(backend)
    return backend


def resolve_renderer(backend: Backend) -> Callable[..., Any]:
    """A plugin's renderer function, imported (PluginProblem if it cannot be)."""
    module, _, function = str(backend.renderer).partition(":")
    try:
        render = getattr(importlib.import_module(module), function)
        if not callable(render):
            raise PluginProblem(f"its renderer {backend.renderer!r} is not a function")
    except PluginProblem:
        raise
    except (Exception, SystemExit) as exc:
        raise PluginProblem(f"its renderer {backend.renderer} fails ({describe(exc)})") from None
    return render  # type: ignore[no-any-return]


# --- the registry's plugins -------------------------------------------------------------


def entry_points() -> list[metadata.EntryPoint]:
    try:
        return sorted(metadata.entry_points(group=PLUGIN_GROUP), key=lambda entry: entry.name)
    except Exception as exc:  # a broken installed distribution's metadata
        _say(
            f"autotune: engine plugins not loaded: their metadata cannot be read ({describe(exc)})"
        )
        return []


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def plugins(taken: set[str]) -> list[Backend]:
    """The engines other installed packages register; a broken one is skipped with one line
    on stderr, so a bad plugin cannot take autotune down with it."""
    if variables.read(NO_PLUGINS_ENV) or variables.read(PROBE_ENV):
        return []
    entries = entry_points()
    if not entries:
        return []
    verdicts = _probe([entry.name for entry in entries])
    found: list[Backend] = []
    for entry in entries:
        problem = verdicts.get(entry.name)
        if problem is None:
            try:
                backend = load(entry, taken)
            except PluginProblem as exc:
                problem = str(exc)
            else:
                found.append(backend)
                taken.add(backend.name)
                continue
        _say(f"autotune: engine plugin {entry.name!r} ({entry.value}) skipped: {problem}")
    return found


def _probe(names: list[str]) -> dict[str, str | None]:
    """Each plugin's verdict from a child process: None when it loads there, else why not.
    A plugin that ends or hangs the child is judged by that, and the rest probed again."""
    verdicts: dict[str, str | None] = {}
    while len(verdicts) < len(names):
        pending = [name for name in names if name not in verdicts]
        started, said, ending = _run_probe(pending)
        verdicts.update(said)
        if started is not None and started not in said:
            verdicts[started] = ending
        elif not said:  # the probe itself failed before any plugin: judge none of them
            verdicts.update(dict.fromkeys(pending, ending))
    return verdicts


def _run_probe(names: list[str]) -> tuple[str | None, dict[str, str | None], str]:
    """(the plugin the child was loading when it ended, the verdicts it gave, why it ended)."""
    env = {**os.environ, PROBE_ENV: "1"}
    command = [sys.executable, "-m", "autotune.backends.probe", *names]
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False
        )
        output, ending = (
            done.stdout,
            f"it ended the process while loading (exit status {done.returncode})",
        )
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout or b""
        ending = f"it did not load within {PROBE_TIMEOUT_S:.0f} s"
    except OSError as exc:
        return None, {}, f"it could not be checked ({describe(exc)})"
    started: str | None = None
    said: dict[str, str | None] = {}
    for line in output.decode("utf-8", "replace").split("\n"):
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict) and message.get("name") in names:
            if "problem" in message:
                said[message["name"]] = message["problem"]
            else:
                started = message["name"]
    return started, said, ending
