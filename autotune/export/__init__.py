"""Turn a measured configuration into a ready-to-run deploy command (or a YAML file).

Each deploy target's renderer is the one its engine names (autotune.backends,
`Backend.renderer`); `render_export` picks it by name. Every export says whether it is
exactly what the trial measured (`Export.exact`) and, in `Export.notes`, what it cannot express.
"""

from __future__ import annotations

import difflib
import functools
import importlib
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from ..backends import BACKENDS, PLUGINS, Backend
from ..backends.plugins import PluginProblem, describe, resolve_renderer
from ..checkpoints.adapters import Adapter
from ..checkpoints.geometry import ImageGeometry
from ..engine_args import EngineArgs
from ..errors import ExportError
from ..params import DEPLOY_TARGETS, TrialConfig
from . import yaml_config
from .base import Export, ServeOptions

# Every deploy target of the registry, and a YAML file of the configuration.
FORMATS: tuple[str, ...] = (*DEPLOY_TARGETS, "yaml")

# A server of unknown kind (--endpoint): each engine's spelling; the others are ignored.
ANY_SERVER_FORCED_LENGTH = ("max_tokens", "min_tokens", "min_new_tokens")

Renderer = Callable[[TrialConfig, ServeOptions], Export]


def forced_length(fmt: str | None, tokens: int) -> dict[str, Any] | None:
    """The request fields that force `tokens`-token answers on `fmt` (None: an endpoint of
    unknown kind), so load tests do equal work (Workload.output_tokens); None when that server
    cannot be made to (`swift deploy`: ms-swift 4.6's requests carry neither a minimum of
    tokens nor ignore_eos)."""
    fields = ANY_SERVER_FORCED_LENGTH if fmt is None else BACKENDS[fmt].length_fields
    return {**dict.fromkeys(fields, tokens), "ignore_eos": True} if fields else None


@functools.cache
def renderer(fmt: str) -> Renderer | None:
    """The function that renders `fmt`'s command (its engine's "module:function"); None for
    a format without one."""
    if fmt == "yaml":
        return yaml_config.render
    backend = BACKENDS.get(fmt)
    if backend is None or backend.renderer is None:
        return None
    if fmt in PLUGINS:
        return _contained(fmt, backend)
    module, _, function = backend.renderer.partition(":")
    render: Renderer = getattr(importlib.import_module(module), function)
    return render


def _contained(fmt: str, backend: Backend) -> Renderer:
    """A plugin's renderer whose failures (at import, when called, or what it returns) are one
    ExportError line naming the plugin; an ExportError of its own passes as it is."""

    def render(config: TrialConfig, opts: ServeOptions) -> Export:
        where = f"the renderer {backend.renderer} of engine plugin {fmt!r}"
        try:
            result = resolve_renderer(backend)(config, opts)
        except ExportError:
            raise
        except PluginProblem as problem:
            raise ExportError(f"engine plugin {fmt!r}: {problem}") from None
        except (Exception, SystemExit) as exc:
            raise ExportError(f"{where} failed ({describe(exc)})") from None
        if not isinstance(result, Export):
            raise ExportError(f"{where} returned a {type(result).__name__}, not an Export")
        return result

    return render


def render_export(
    config: TrialConfig,
    *,
    fmt: str,
    model: str,
    host: str = "0.0.0.0",
    port: int | None = None,
    served_model_name: str | None = None,
    session_len: int | None = None,
    engine_args: dict[str, Any] | None = None,
    image_geometry: ImageGeometry | dict[str, int] | None = None,
    adapters: list[Adapter] | tuple[Adapter, ...] = (),
    quantized_models: dict[str, str] | None = None,
) -> Export:
    """Render `config` as a deploy command for `fmt`.

    Args:
        config: The configuration a trial measured.
        fmt: One of `FORMATS`.
        model: Model id or local path, passed to the engine unchanged.
        host: Address the server binds.
        port: Port the server binds; None keeps the engine's default.
        served_model_name: Name clients put in "model"; None keeps the engine's default.
        session_len: Context cap of engines that reserve KV cache per sequence (--session-len,
            --max-model-len); None keeps the engine's default.
        engine_args: Extra flags for this format (a space file's `engine_args.<fmt>`),
            appended as given; keys autotune sets itself are refused.
        image_geometry: The checkpoint processor's image grid and pixel bounds (a study's
            `image_geometry` attribute); None means Qwen3-VL's released values.
        adapters: LoRA adapters to serve (autotune.checkpoints.adapters), the first named.
        quantized_models: The space's `quantized_checkpoints`, by weight_quant value.

    Raises:
        ExportError: Unknown format, bad option, or a configuration the target cannot serve.
    """
    render = renderer(fmt)
    if render is None:
        close = difflib.get_close_matches(fmt, FORMATS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ExportError(f"unknown export format {fmt!r}.{hint} Available: {', '.join(FORMATS)}")
    if not model:
        raise ExportError("export needs a model id or path")
    if port is not None and not 0 < port < 65536:
        raise ExportError(f"port {port} is out of range 1-65535")
    if session_len is not None and session_len < 1:
        raise ExportError(f"session_len must be positive, got {session_len}")
    extra = _engine_args(fmt, engine_args or {})
    session_len_flag = BACKENDS[fmt].session_len_flag if fmt in BACKENDS else None
    if session_len is not None and session_len_flag in extra:
        raise ExportError(
            f"session_len is given twice: as an option and as engine_args --{session_len_flag}"
        )
    opts = ServeOptions(
        model=model,
        host=host,
        port=port,
        served_model_name=served_model_name,
        session_len=session_len,
        engine_args=extra,
        image_geometry=image_geometry
        if isinstance(image_geometry, ImageGeometry)
        else ImageGeometry.from_dict(image_geometry),
        adapters=tuple(adapters),
        quantized_models=dict(quantized_models or {}),
    )
    return render(config, opts)


def _engine_args(fmt: str, args: dict[str, Any]) -> dict[str, Any]:
    """`args` validated and normalised as a space file's engine_args.<fmt> would be."""
    if not args:
        return {}
    if fmt not in EngineArgs.model_fields:
        raise ExportError(f"format {fmt!r} takes no engine_args")
    try:
        return EngineArgs.model_validate({fmt: args}).for_format(fmt)
    except ValidationError as exc:
        message = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise ExportError(f"engine_args.{fmt}: {message}") from None


__all__ = [
    "FORMATS",
    "Export",
    "ServeOptions",
    "forced_length",
    "render_export",
    "renderer",
]
