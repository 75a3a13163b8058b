"""LoRA adapters served on top of the model: `--adapter NAME=PATH`, checked up front.

An adapter is a PEFT LoRA folder (adapter_config.json + weights). Every engine serves it
under its NAME, and requests name it in their "model" field, so a trial measures the adapted
model; the first adapter given is the one measured (the others are loaded and exported).

Which targets can serve an adapter for Qwen3-VL:
- ms-swift 4.6: `swift deploy --adapters NAME=PATH`, lazily loaded on its first request;
- vLLM: `--enable-lora --lora-modules NAME=PATH --max-lora-rank R` (Qwen3-VL supports LoRA);
- LMDeploy 0.18: its PyTorch engine fails to load LoRA adapters of Qwen VL models
  (InternLM/lmdeploy#4162, open: a KeyError on the language-model prefix), so autotune does
  not measure LMDeploy with an adapter and its export says so (`--strict` refuses it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.backends import BACKENDS
from autotune.errors import ModelError
from autotune.records.stored import StudyRecord

# Served model names: what a client writes in "model" and what a flag value carries.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

# Targets whose engine cannot serve a LoRA adapter of Qwen3-VL, and why.
CANNOT_SERVE: dict[str, str] = {
    name: backend.adapters_refused for name, backend in BACKENDS.items() if backend.adapters_refused
}


@dataclass(frozen=True)
class Adapter:
    """A LoRA adapter: the name it is served under, its folder and its rank."""

    name: str
    path: str
    rank: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "rank": self.rank}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Adapter:
        return cls(name=str(data["name"]), path=str(data["path"]), rank=int(data["rank"]))


def parse_adapters(pairs: tuple[str, ...] | list[str]) -> list[Adapter]:
    """`NAME=PATH` pairs as checked adapters; one ModelError line for the first bad one."""
    adapters: list[Adapter] = []
    for pair in pairs:
        name, sep, raw_path = pair.partition("=")
        name = name.strip()
        if not sep or not raw_path.strip():
            raise ModelError(f"--adapter {pair!r}: write it as NAME=PATH, e.g. ocr=./my-lora")
        if not _NAME.fullmatch(name):
            raise ModelError(
                f"--adapter {name!r}: a name is 1-64 letters, digits, '.', '_' or '-', "
                "starting with a letter or a digit"
            )
        if any(adapter.name == name for adapter in adapters):
            raise ModelError(f"--adapter {name!r} is given twice; give each adapter one name")
        adapters.append(load_adapter(name, raw_path.strip()))
    return adapters


def load_adapter(name: str, raw_path: str) -> Adapter:
    """The adapter in folder `raw_path`, checked to be a PEFT LoRA with weights."""
    path = Path(raw_path).expanduser()
    where = f"--adapter {name}={raw_path}"
    if not path.is_dir():
        raise ModelError(f"{where}: no such folder; pass the folder PEFT's save_pretrained wrote")
    config_file = path / "adapter_config.json"
    if config_file.exists() and not config_file.is_file():
        # Reading a FIFO would wait for a writer forever.
        raise ModelError(f"{where}: adapter_config.json is not a regular file")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelError(f"{where}: no adapter_config.json there; not a PEFT adapter") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise ModelError(f"{where}: adapter_config.json is not readable JSON ({exc})") from None
    if not isinstance(config, dict) or config.get("peft_type") != "LORA":
        kind = config.get("peft_type") if isinstance(config, dict) else None
        raise ModelError(f"{where}: a {kind or 'non-PEFT'} adapter; only LoRA adapters are served")
    weights = [p for p in path.iterdir() if p.name.startswith("adapter_model.") and p.is_file()]
    if not weights:
        raise ModelError(f"{where}: no adapter_model.safetensors (or .bin) beside the config")
    rank = config.get("r")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise ModelError(f"{where}: adapter_config.json has no valid rank 'r'")
    ranks = config.get("rank_pattern") or {}
    if not isinstance(ranks, dict):
        raise ModelError(f"{where}: adapter_config.json's rank_pattern is not a mapping")
    rank = max([rank, *(r for r in ranks.values() if type(r) is int and r > 0)])
    return Adapter(name=name, path=str(path.resolve()), rank=rank)


def stored_adapters(study: StudyRecord) -> list[Adapter]:
    """The adapters a study recorded (its `adapters` attribute)."""
    return [Adapter.from_dict(item) for item in study.adapters]


def served_model(adapters: list[Adapter], served: list[str]) -> str:
    """The "model" a request names: the first adapter, else the server's first model."""
    if adapters:
        return adapters[0].name
    return served[0]
