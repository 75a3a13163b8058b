"""Random-weight checkpoints of a real architecture, for speed studies without the download.

`--dummy-weights` measures Qwen3-VL-2B's speed from its config alone, as vLLM's
`--load-format dummy` does: a model built from the real config with random weights runs the
same kernels on the same shapes as the released checkpoint, so latency, throughput and memory
carry over while its answers are noise. Accuracy is therefore timed, not judged: the accuracy
pass runs for its time alone, with no verdict (see `without_accuracy`, autotune.accuracy.timed).

Every backend, in-process or server, loads checkpoints from disk, so the random model is saved
once per architecture into a cache folder (`studies/dummy-checkpoints/<key>/`, or
$AUTOTUNE_DUMMY_DIR) and every trial points at it. It is built in a child process (on the GPU
when there is one, where random init of 2 B parameters takes seconds), so the study process
never holds GPU memory that the engines would then miss.

The tokenizer is the bundled test model's character-level one: every ordinary id decodes to one
visible character, so random output streams as text and servers send one chunk per token.
Ids with no visible text (whitespace, the added tokens, eos included, and the unused tail of the
embedding) get zero embedding rows; with the tied lm_head their logit is exactly 0 while real
ids get random ones, so greedy decoding never stops early and every answer has
max_new_tokens tokens.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from autotune import variables
from autotune.checkpoints.source import SUPPORTED_MODEL_TYPES
from autotune.errors import ModelError, SpaceError
from autotune.space import REPO_ROOT, SearchSpace

# Bump when the files written below change, so stale cached checkpoints are not reused.
FORMAT_VERSION = 1
SEED = 0
DATA_DIR = Path(__file__).resolve().parents[1] / "data"
# Real configs known without a download: hub id -> bundled config.json (release layout).
BUNDLED_CONFIGS: dict[str, Path] = {
    "Qwen/Qwen3-VL-2B-Instruct": DATA_DIR / "qwen3-vl-2b-instruct.config.json",
}
TOKENIZER_SOURCE = REPO_ROOT / "models" / "tiny-qwen3-vl"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "generation_config.json",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
)
COMPLETE_MARKER = ".autotune-dummy-complete"

REASON = (
    "dummy weights: random weights of the real architecture; speed, memory and start-up carry "
    "over to the released checkpoint, answers do not, so the accuracy constraint and "
    "screening's verdicts are switched off and the accuracy pass is timed, not judged"
)


DUMMY_DIR_ENV = "AUTOTUNE_DUMMY_DIR"


def cache_root() -> Path:
    named: str | None = variables.read(DUMMY_DIR_ENV)
    return Path(named).expanduser() if named else REPO_ROOT / "studies" / "dummy-checkpoints"


def _staging_folder(target: Path) -> Path:
    """A fresh folder beside `target` to build into; one line naming the cache folder when it
    cannot be made (a path through a file, no permission, a read-only disk)."""
    staging = target.parent / f"{target.name}.tmp-{os.getpid()}"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
    except OSError as exc:
        raise ModelError(
            f"cannot make the dummy-checkpoint folder {target.parent}: {exc.strerror or exc}; "
            f"set {DUMMY_DIR_ENV} to a folder you can write, or unset it"
        ) from None
    return staging


def architecture_config(model: str) -> dict[str, Any]:
    """The config.json of `model`: a local checkpoint folder's, or a bundled real one."""
    path = Path(model).expanduser()
    if path.is_dir():
        config_file = path / "config.json"
        if not config_file.is_file():
            raise ModelError(f"'{model}' has no config.json: cannot build dummy weights from it")
        config = json.loads(config_file.read_text(encoding="utf-8"))
    elif model in BUNDLED_CONFIGS:
        config = json.loads(BUNDLED_CONFIGS[model].read_text(encoding="utf-8"))
    else:
        known = ", ".join(sorted(BUNDLED_CONFIGS))
        raise ModelError(
            f"--dummy-weights knows no config for '{model}' (bundled: {known}); pass --model "
            "PATH to a folder holding the model's config.json"
        )
    if config.get("model_type") not in SUPPORTED_MODEL_TYPES:
        raise ModelError(
            f"'{model}' is a '{config.get('model_type')}' model; dummy weights are built for "
            f"model_type {' or '.join(sorted(SUPPORTED_MODEL_TYPES))}"
        )
    config.pop("transformers_version", None)  # not part of the architecture
    return config


def checkpoint_key(config: dict[str, Any], layout: str = "none") -> str:
    """Names one architecture + weight layout + tokenizer + builder version; the cache
    folder's name."""
    digest = hashlib.sha256()
    digest.update(json.dumps(config, sort_keys=True).encode())
    if layout != "none":
        digest.update(f"layout {layout}".encode())
    for name in TOKENIZER_FILES:
        digest.update(name.encode())
        digest.update((TOKENIZER_SOURCE / name).read_bytes())
    digest.update(f"v{FORMAT_VERSION} seed{SEED}".encode())
    return digest.hexdigest()[:16]


def dummy_checkpoint(
    model: str, *, device: str = "auto", layout: str = "none", timeout_s: float = 1800
) -> str:
    """The folder of a random-weight checkpoint of `model`'s architecture; built if missing.

    `layout` fp8: the weights in the block-FP8 layout of Qwen's -FP8 releases
    (autotune.checkpoints.fp8), for engines that serve such a checkpoint.
    """
    if layout not in ("none", "fp8"):
        raise ModelError(f"dummy weights have no {layout!r} layout (none or fp8)")
    config = architecture_config(model)
    target = cache_root() / checkpoint_key(config, layout)
    if (target / COMPLETE_MARKER).is_file():
        return str(target)
    staging = _staging_folder(target)
    (staging / "source-config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    argv = [sys.executable, "-m", "autotune.checkpoints.dummy", str(staging), "--device", device]
    argv += ["--layout", layout]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        shutil.rmtree(staging, ignore_errors=True)
        raise ModelError(f"building dummy weights took over {timeout_s:.0f} s") from None
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ModelError(f"building dummy weights for '{model}' failed: {tail[0]}")
    try:
        staging.rename(target)
    except OSError:  # another study built the same checkpoint meanwhile: use theirs
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / COMPLETE_MARKER).is_file():
            raise
    return str(target)


def without_accuracy(space: SearchSpace) -> SearchSpace:
    """`space` with the accuracy constraint and screening off (answers of random weights).

    Its evaluation set stays the space's, a pool included: the accuracy pass still answers
    its items, for its time (autotune.accuracy.timed), and load tests use them as a real
    study's do."""
    accuracy = space.constraints.accuracy.model_copy(update={"enabled": False})
    constraints = space.constraints.model_copy(update={"accuracy": accuracy})
    screening = space.screening.model_copy(update={"items": 0})
    objectives = [o for o in space.objectives if o.metric != "accuracy"]
    if not objectives:
        raise SpaceError("with --dummy-weights accuracy cannot be an objective; pick another")
    return space.model_copy(
        update={"constraints": constraints, "screening": screening, "objectives": objectives}
    )


# --- the child process --------------------------------------------------------------------


def silenced_ids(tokenizer_json: dict[str, Any], vocab_size: int) -> list[int]:
    """Ids without visible text: whitespace characters and every id outside the plain vocab."""
    vocab: dict[str, int] = tokenizer_json["model"]["vocab"]
    visible = {i for token, i in vocab.items() if token.strip()}
    return [i for i in range(vocab_size) if i not in visible]


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def build(out: Path, *, device: str, layout: str = "none") -> None:
    """Build and save the checkpoint described by out/source-config.json into `out`."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    source = json.loads((out / "source-config.json").read_text(encoding="utf-8"))
    _write_json(out / "config.json", source)
    config = AutoConfig.from_pretrained(out)
    torch.manual_seed(SEED)
    started = time.perf_counter()
    with torch.device(device):
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)
    tokenizer_json = json.loads((TOKENIZER_SOURCE / "tokenizer.json").read_text(encoding="utf-8"))
    embedding = model.get_input_embeddings().weight
    ids = silenced_ids(tokenizer_json, embedding.shape[0])
    with torch.no_grad():
        embedding[torch.tensor(ids, device=embedding.device)] = 0.0
    model.save_pretrained(out)
    # The source config, not the re-serialised one: engines that parse config.json themselves
    # (LMDeploy, vLLM) then see the released checkpoint's layout and keys.
    if layout == "fp8":
        from autotune.checkpoints.fp8 import QUANTIZATION_CONFIG, quantize_checkpoint

        quantize_checkpoint(out)
        source = {**source, "quantization_config": QUANTIZATION_CONFIG}
    _write_json(out / "config.json", source)
    for name in TOKENIZER_FILES:
        shutil.copyfile(TOKENIZER_SOURCE / name, out / name)
    vision = source.get("vision_config", {})
    for name in ("preprocessor_config.json", "video_preprocessor_config.json"):
        processor = json.loads((out / name).read_text(encoding="utf-8"))
        for key, vision_key in (
            ("patch_size", "patch_size"),
            ("merge_size", "spatial_merge_size"),
            ("temporal_patch_size", "temporal_patch_size"),
        ):
            if vision_key in vision:
                processor[key] = vision[vision_key]
        _write_json(out / name, processor)
    params = sum(p.numel() for p in model.parameters())
    (out / "source-config.json").unlink()
    for path in out.iterdir():
        path.chmod(0o644)  # save_pretrained writes 0600; servers may run as another user
    (out / COMPLETE_MARKER).write_text(
        json.dumps({"parameters": params, "device": device, "seed": SEED, "layout": layout}) + "\n",
        encoding="utf-8",
    )
    print(
        f"dummy checkpoint: {params:,} parameters on {device} in "
        f"{time.perf_counter() - started:.1f} s -> {out}",
        file=sys.stderr,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build a random-weight checkpoint (internal).")
    parser.add_argument("out", type=Path, help="folder holding source-config.json")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--layout", default="none", choices=["none", "fp8"])
    args = parser.parse_args(argv)
    build(args.out, device=args.device, layout=args.layout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
