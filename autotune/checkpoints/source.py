"""Finding the model: a local checkpoint folder or a Hugging Face Hub id, checked up front.

Resolved in the study process before anything is written, so a wrong path or an unreachable hub
fails with one line and leaves the study database untouched.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from autotune.errors import ModelError
from autotune.records.stored import StudyRecord

# Architectures whose processor, chat template and image-token layout autotune knows.
SUPPORTED_MODEL_TYPES = frozenset({"qwen3_vl", "qwen3_vl_moe"})
_DOWNLOAD_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken"]


def resolve_model(model: str) -> str:
    """The local folder holding `model` (a path, or a hub id already cached or downloadable)."""
    path = Path(model).expanduser()
    if path.exists() or model.startswith((".", "/", "~")):
        return str(_check_checkpoint(path, shown=model))
    if model.count("/") != 1:
        raise ModelError(
            f"model '{model}' is neither an existing folder nor a hub id of the form owner/name"
        )
    return str(_check_checkpoint(_from_hub(model), shown=model))


def _from_hub(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download

    try:
        return Path(
            snapshot_download(repo_id, allow_patterns=_DOWNLOAD_PATTERNS, local_files_only=True)
        )
    except Exception:
        pass  # not cached: try the hub itself below
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "10")
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "30")
    try:
        return Path(snapshot_download(repo_id, allow_patterns=_DOWNLOAD_PATTERNS))
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelError(
            f"cannot get '{repo_id}' from the Hugging Face Hub ({reason[:120]}); offline? "
            "pass --model PATH to a local copy, or try --space smoke with the bundled test model"
        ) from None


def _check_checkpoint(path: Path, *, shown: str) -> Path:
    if not path.exists():
        raise ModelError(f"model path '{shown}' does not exist; pass --model PATH to a checkpoint")
    if not path.is_dir():
        raise ModelError(f"model path '{shown}' is a file; pass the checkpoint folder instead")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ModelError(f"'{shown}' has no config.json: not a Hugging Face checkpoint folder")
    try:
        model_type = json.loads(config_file.read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError) as exc:
        raise ModelError(f"'{config_file}' is not readable JSON: {exc}") from None
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ModelError(
            f"'{shown}' is a '{model_type}' model; autotune tunes Qwen3-VL-style image-text "
            f"models (model_type {' or '.join(sorted(SUPPORTED_MODEL_TYPES))})"
        )
    return path.resolve()


def study_model_path(study: StudyRecord, *, device: str = "auto") -> str:
    """The checkpoint a stored study measured, on this machine.

    The recorded path can be missing here: the study was run on another machine, or its
    random-weight checkpoint was cleaned up. A dummy checkpoint is then rebuilt (the same
    seed and architecture give the same weights); a real model is looked up again by its id.
    Either way the answer is a folder that exists, or one ModelError line.
    """
    recorded = study.model_path or ""
    model = study.model or recorded
    if study.dummy_weights:
        from autotune.checkpoints.dummy import COMPLETE_MARKER, dummy_checkpoint

        if recorded and (Path(recorded) / COMPLETE_MARKER).is_file():
            return recorded
        return dummy_checkpoint(model, device=device)
    if recorded and (Path(recorded) / "config.json").is_file():
        return recorded
    return resolve_model(model)


def study_quantized_paths(study: StudyRecord, *, device: str = "auto") -> dict[str, str]:
    """The quantised checkpoints a stored study served, on this machine (found or rebuilt,
    like `study_model_path`)."""
    paths: dict[str, str] = {}
    model = study.model or ""
    for layout, recorded in study.quantized_paths.items():
        if recorded and (Path(recorded) / "config.json").is_file():
            paths[layout] = str(recorded)
        elif study.dummy_weights:
            from autotune.checkpoints.dummy import dummy_checkpoint

            paths[layout] = dummy_checkpoint(model, device=device, layout=layout)
        else:
            checkpoint = study.quantized_checkpoints.get(layout)
            if not checkpoint:
                raise ModelError(
                    f"the study served a {layout} checkpoint that is not here and names no id "
                    "to fetch it again; pass its space's quantized_checkpoints"
                )
            paths[layout] = resolve_model(str(checkpoint))
    return paths
