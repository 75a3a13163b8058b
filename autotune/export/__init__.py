"""Turn a measured configuration into a ready-to-run deploy command (or a YAML file).

One module per target; `render_export` picks it by name. Every export says whether it is
exactly what the trial measured (`Export.exact`) and, in `Export.notes`, what it cannot express.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from ..checkpoints.adapters import Adapter
from ..checkpoints.geometry import ImageGeometry
from ..engine_args import SESSION_LEN_FLAG, EngineArgs
from ..errors import ExportError
from ..params import DEPLOY_TARGETS, TrialConfig
from . import lmdeploy, swift, vllm, yaml_config
from .base import Export, ServeOptions

# Every deploy target of the registry, and a YAML file of the configuration.
FORMATS: tuple[str, ...] = (*DEPLOY_TARGETS, "yaml")

# Request fields that make a server answer exactly N tokens, by format: load tests send them so
# every trial does equal work (Workload.output_tokens). `swift deploy` has no such field: its
# requests carry neither min_tokens nor ignore_eos (ms-swift 4.6 RequestConfig).
_FORCED_LENGTH: dict[str, Callable[[int], dict[str, Any]]] = {
    "lmdeploy": lmdeploy.forced_length,
    "vllm": vllm.forced_length,
}
# A server of unknown kind (--endpoint): each engine's spelling; the others are ignored.
ANY_SERVER_FORCED_LENGTH = ("max_tokens", "min_tokens", "min_new_tokens")


def forced_length(fmt: str | None, tokens: int) -> dict[str, Any] | None:
    """The request fields that force `tokens`-token answers on `fmt` (None: an endpoint of
    unknown kind); None when that server cannot be made to."""
    if fmt is None:
        return {**dict.fromkeys(ANY_SERVER_FORCED_LENGTH, tokens), "ignore_eos": True}
    force = _FORCED_LENGTH.get(fmt)
    return force(tokens) if force is not None else None


_RENDERERS: dict[str, Callable[[TrialConfig, ServeOptions], Export]] = {
    "swift": swift.render,
    "lmdeploy": lmdeploy.render,
    "vllm": vllm.render,
    "yaml": yaml_config.render,
}


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
        session_len: Context cap for engines that reserve KV cache per sequence (LMDeploy
            --session-len, vLLM --max-model-len); None keeps the engine's default.
        engine_args: Extra flags for this format (a space file's `engine_args.<fmt>`),
            appended as given; keys autotune sets itself are refused.
        image_geometry: The checkpoint processor's image grid and pixel bounds (a study's
            `image_geometry` attribute); None means Qwen3-VL's released values.
        adapters: LoRA adapters to serve (autotune.checkpoints.adapters); requests name the
            first.
        quantized_models: The model's checkpoints in a quantised layout, by weight_quant
            value (a space's `quantized_checkpoints`), for engines that load one.

    Raises:
        ExportError: Unknown format, bad option, or a configuration the target cannot serve.
    """
    renderer = _RENDERERS.get(fmt)
    if renderer is None:
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
    if session_len is not None and SESSION_LEN_FLAG.get(fmt) in extra:
        raise ExportError(
            f"session_len is given twice: as an option and as engine_args --{SESSION_LEN_FLAG[fmt]}"
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
    return renderer(config, opts)


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
]
