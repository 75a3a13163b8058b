"""Measure the bundled test model's accuracy by image max side and write its model card.

Two ways to measure, with the same engine code a trial uses:

* `evaluate_checkpoint`: in-process through TransformersEngine (fast; the training run uses it on
  the GPU right after training);
* `autotune_eval_rows`: one ``autotune eval --space smoke --json`` per dtype and image max side,
  which is how the issue's targets are defined; the card's table comes from these.

Usage (from the repository root, on the CPU machine the smoke space targets)::

    python -m tools.model_card                       # measure, print the table
    python -m tools.model_card --write               # ... and write models/tiny-qwen3-vl/README.md
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from autotune.checkpoints.geometry import read_geometry
from tools.arguments import model_folder

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = REPO_ROOT / "models" / "tiny-qwen3-vl"
# The smoke space's image sides: the card and the training run measure what the study searches.
EVAL_SIZES: tuple[int | None, ...] = tuple(
    yaml.safe_load((REPO_ROOT / "search_spaces" / "smoke.yaml").read_text(encoding="utf-8"))[
        "params"
    ]["image_max_side"]["choices"]
)
DTYPES: tuple[str, ...] = ("float32", "bfloat16")
TRAINING_LOG = "training_log.json"  # written next to the weights by tools/train_test_model.py


def evaluate_checkpoint(
    model_dir: Path,
    *,
    device: str,
    dtypes: Sequence[str] = DTYPES,
    sizes: Sequence[int | None] = EVAL_SIZES,
    batch_size: int = 8,
    evalset: str = "smoke",
) -> list[dict[str, Any]]:
    """Greedy accuracy through autotune's own engine, per dtype and image max side."""
    from autotune.accuracy.scoring import score_predictions
    from autotune.engines.inprocess.transformers import TransformersEngine
    from autotune.evalset.dataset import load_evalset
    from autotune.params import TrialConfig
    from autotune.records import Prompt

    items = load_evalset(evalset)
    requests = [Prompt(it.id, it.load_image(), it.prompt) for it in items.items]
    rows = []
    for dtype in dtypes:
        for side in sizes:
            config = TrialConfig(
                dtype=dtype,
                image_max_side=side,
                batch_size=batch_size,
                max_new_tokens=16,
                do_sample=False,
            )
            engine = TransformersEngine(str(model_dir), config, device=device)
            engine.load()
            predictions = {}
            for start in range(0, len(requests), batch_size):
                for done in engine.generate(requests[start : start + batch_size], config):
                    predictions[done.item_id] = done.text
            engine.close()
            report = score_predictions(items, predictions)
            rows.append(
                {
                    "dtype": dtype,
                    "image_max_side": side,
                    "accuracy": report.accuracy,
                    "by_category": report.by_category,
                    "predictions": predictions,
                }
            )
    return rows


def eval_command(
    dtype: str, side: int | None, *, space: str = "smoke", model: Path | None = None
) -> list[str]:
    """The `autotune eval` arguments for one cell (the reference is float32 at full size)."""
    # In process: the reader's own reading, without a server's start-up per cell (the smoke
    # space's reference runs `swift deploy`, which serves the same transformers model with
    # the same image preprocessing: tests/export/test_swift_reproduces.py).
    args = ["autotune", "eval", "--space", space, "--json", "--param", "backend=transformers"]
    if model is not None:
        args += ["--model", str(model)]
    if side is not None:
        args += ["--param", f"image_max_side={side}"]
    if dtype != "float32":
        args += ["--param", f"dtype={dtype}"]
    return args


def autotune_eval_rows(
    *,
    space: str = "smoke",
    model: Path | None = None,
    dtypes: Sequence[str] = DTYPES,
    sizes: Sequence[int | None] = EVAL_SIZES,
) -> list[dict[str, Any]]:
    """Run `autotune eval` once per cell and keep what it printed (model: the space's)."""
    executable = shutil.which("autotune")
    rows = []
    for dtype in dtypes:
        for side in sizes:
            args = eval_command(dtype, side, space=space, model=model)
            argv = [executable, *args[1:]] if executable else [sys.executable, "-m", "autotune.cli"]
            if not executable:
                argv += args[1:]
            started = time.perf_counter()
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode:
                raise RuntimeError(f"{' '.join(args)} failed:\n{done.stderr[-2000:]}")
            result = json.loads(done.stdout)
            rows.append(
                {
                    "dtype": dtype,
                    "image_max_side": side,
                    "accuracy": result["accuracy"],
                    "by_category": result["accuracy_by_category"],
                    "command": " ".join(args),
                    "seconds": round(time.perf_counter() - started, 1),
                    "environment": result.get("environment", {}),
                }
            )
            print(f"{' '.join(args)}: {result['accuracy']:.3f}", flush=True)
    return rows


def accuracy_table(rows: Sequence[dict[str, Any]]) -> str:
    """Markdown: one row per image max side, one column per dtype (with per-category)."""
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    sides = list(dict.fromkeys(r["image_max_side"] for r in rows))
    lookup = {(r["dtype"], r["image_max_side"]): r for r in rows}
    lines = ["| image max side | " + " | ".join(dtypes) + " |", "|---" * (len(dtypes) + 1) + "|"]
    for side in sides:
        cells = []
        for dtype in dtypes:
            row = lookup[(dtype, side)]
            parts = ", ".join(f"{k} {v:.2f}" for k, v in row["by_category"].items())
            cells.append(f"{row['accuracy']:.3f} ({parts})")
        lines.append(f"| {'full' if side is None else side} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _architecture(config: dict[str, Any]) -> list[str]:
    text, vision = config["text_config"], config["vision_config"]
    return [
        "| part | sizes |",
        "|---|---|",
        f"| text decoder | hidden {text['hidden_size']}, {text['num_hidden_layers']} layers, "
        f"{text['num_attention_heads']} heads / {text['num_key_value_heads']} kv heads of "
        f"{text['head_dim']}, MLP {text['intermediate_size']}, vocabulary "
        f"{text['vocab_size']} (tied embedding) |",
        f"| vision encoder | hidden {vision['hidden_size']}, depth {vision['depth']}, "
        f"{vision['num_heads']} heads, MLP {vision['intermediate_size']}, patch "
        f"{vision['patch_size']}, merge {vision['spatial_merge_size']}, temporal patch "
        f"{vision['temporal_patch_size']}, deepstack blocks {vision['deepstack_visual_indexes']} |",
    ]


def _status(rows: Sequence[dict[str, Any]]) -> str:
    """The card's verdict against issue 38's targets, from the measured table."""
    problems = []
    for dtype in dict.fromkeys(r["dtype"] for r in rows):
        curve = [r["accuracy"] for r in rows if r["dtype"] == dtype]
        full, smallest = curve[0], curve[-1]  # rows run from full size to the smallest side
        if full < 0.95:
            problems.append(f"{dtype}: {full:.2f} at full size (target at least 0.95)")
        if sum(0.2 < a < 0.9 for a in curve) < 2:
            problems.append(f"{dtype}: fewer than two sides between 0.2 and 0.9")
        if smallest > 0.2:
            problems.append(f"{dtype}: {smallest:.2f} at the smallest side (target at most 0.20)")
        if curve != sorted(curve, reverse=True):
            problems.append(f"{dtype}: accuracy rises as the image shrinks")
    if not rows:
        return "**Status:** not measured."
    if problems:
        return "**Status: targets not met.** " + "; ".join(problems) + "."
    return (
        "**Status:** meets its targets (issue 38): at least 0.95 at full size, two searched "
        "sides or more between 0.2 and 0.9, at most 0.20 at the smallest, never better for a "
        "smaller image, in float32 and bfloat16; so the accuracy floor has graded trade-offs "
        "to decide, not only a cliff."
    )


def render_card(model_dir: Path, rows: Sequence[dict[str, Any]]) -> str:
    """README.md of the checkpoint folder: what it is, how it was trained, how well it reads."""
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    log = json.loads((model_dir / TRAINING_LOG).read_text(encoding="utf-8"))
    train = log["train"]
    args = log["args"]
    size = sum(f.stat().st_size for f in model_dir.iterdir() if f.is_file())
    env = rows[0].get("environment", {}) if rows else {}
    # The processor's bounds as autotune reads them for every export.
    geometry = read_geometry(model_dir)
    lines = [
        "# tiny-qwen3-vl: the bundled Qwen3-VL test model",
        "",
        "A Qwen3VLForConditionalGeneration at toy sizes, trained from scratch on 2 CPU cores "
        "on the smoke evaluation set's short codes and coloured-shape questions. It is a test "
        "fixture, not a useful model.",
        "",
        _status(rows),
        "",
        "Everything an engine reads is real Qwen3-VL: the architecture class, the processor "
        "(patch 16, merge 2, max pixels 16777216), Qwen's special-token ids in a 151936-row "
        "embedding, the chat template. The tokenizer is character-level "
        "(`tools/make_test_model.py`). One departure: the processor's min pixels are "
        f"{geometry.min_pixels} ({_tokens(geometry.min_tokens)}) instead of 65536, so every "
        "smaller side costs fewer tokens (the smoke set's 512 x 64 images cost 32 at full size, "
        "8 at side 256, 1 at side 32) and image size is a real speed trade-off on the CPU; "
        "autotune reads it from `preprocessor_config.json` and pins it in every export "
        f"(`IMAGE_MIN_TOKEN_NUM={geometry.min_tokens}`).",
        "",
        "## Architecture",
        "",
        *_architecture(config),
        "",
        f"{train['parameters']:,} parameters, bf16 weights; {size / 1e6:.1f} MB in this folder.",
        "",
        "## Training",
        "",
        f"- command: `{log['command']}`; into this folder: `python -m tools.train_test_model "
        f"--out models/tiny-qwen3-vl --overwrite --device {train['device']} "
        f"--steps {train['steps']} --clean-steps {args.get('clean_steps', 0)}`",
        f"- seed {args['seed']}; {train['steps']} steps of {args['batch_size']} "
        f"({train['samples']:,} examples), AdamW, peak lr {args['lr']}, "
        f"{train['warmup_steps']} warm-up steps then cosine decay, float32 on the CPU",
        f"- {train['train_seconds']} s of training on {_machine(train)} "
        f"(torch {log['versions']['torch']}, transformers {log['versions']['transformers']}); "
        f"{log.get('wall_seconds', '?')} s for the whole command"
        + (", evaluation included" if log.get("eval") else ""),
        "- data: the smoke set's own item makers (`tools/make_evalset.py` `_smoke_line`, "
        f"`_smoke_scene`) with seeds `train-{args['seed']}/<index>` (the evaluation sets use "
        f"`<set>/<category>/<index>`): {log['text_share']:.0%} codes "
        f"({_lines(log)}), the rest shape strips with count and colour questions "
        f"({_scenes(log)}), the smoke prompts",
        "- images reach the model as in autotune's engine, on the processor's grid; "
        + ", ".join(f"{'full size' if s is None else s}: {p:.0%}" for s, p in log["max_side_mix"])
        + f" (full size only for the first {args.get('clean_steps', 0)} steps): shrunk, glyphs "
        "share vision tokens and blur, and the reader reads them as far as the pixels allow",
        "- loss: cross-entropy on the answer tokens and `<|im_end|>`, so greedy decoding stops, "
        "computed over the ~120 token ids the data uses plus one logit standing in for all the "
        "others (their embedding rows share one trained vector: the same loss as the full "
        "softmax); plus a linear glyph probe on the vision tokens (a training aid, not saved) "
        "that ends the plateau a reader trained from scratch otherwise sits on: it names what "
        "each token's left and right half shows, full size and shrunk alike (at full size a "
        "glyph fills 2 x 2 tokens, at side 256 one, at 128 two glyphs share one; a half two "
        "glyphs fall in is left unlabelled)",
        f"- full log: `{TRAINING_LOG}`",
        "",
        "## Accuracy by image max side",
        "",
        f"Smoke set ({_items()} items), greedy, measured on the CPU with `autotune eval` (one "
        "run per "
        "cell: `" + (rows[0]["command"] if rows else "") + "`, then `--param "
        "image_max_side=N` and `--param dtype=bfloat16`)"
        + (f"; torch {env['torch_version']}" if "torch_version" in env else "")
        + ":",
        "",
        accuracy_table(rows),
        "",
        "Regenerate this card with `python -m tools.model_card --write`.",
        "",
    ]
    return "\n".join(lines)


def _tokens(n: int) -> str:
    return f"{n} vision token" + ("" if n == 1 else "s")


def _machine(train: dict[str, Any]) -> str:
    if train.get("gpu"):
        return str(train["gpu"])
    cores = train.get("cores")
    return f"{cores} CPU cores" if cores else str(train.get("device", "?"))


def _items() -> int:
    from autotune.evalset.dataset import load_evalset

    return len(load_evalset("smoke").items)


def _lines(log: dict[str, Any]) -> str:
    data = log.get("data")
    if not data:  # runs before the data recipe was logged
        return "4-8 letters and digits, fonts 14-42 px"
    low, high = data["line_length"]
    return (
        f"{low}-{high} of the {len(data['line_alphabet'])} glyphs {data['line_alphabet']}, "
        f"fonts {data['font_px'][0]}-{data['font_px'][1]} px, one glyph per {_cell(data)} px cell"
    )


def _cell(data: dict[str, Any]) -> int:
    from tools.make_evalset import SMOKE_CELL  # runs that did not log it trained on this layout

    return int(data.get("cell", SMOKE_CELL))


def _scenes(log: dict[str, Any]) -> str:
    data = log.get("data")
    if not data:
        return "shapes filling their grid cells"
    return f"objects of {data['object_px'][0]}-{data['object_px'][1]} px"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", nargs="?", type=model_folder, default=DEFAULT_MODEL)
    parser.add_argument("--write", action="store_true", help="write README.md into model_dir")
    parser.add_argument("--json", type=Path, default=None, help="also save the rows here")
    args = parser.parse_args(argv)
    # The smoke space's own model path is the default; another folder is passed explicitly.
    same = args.model_dir.resolve() == DEFAULT_MODEL.resolve()
    rows = autotune_eval_rows(model=None if same else args.model_dir)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    if args.write:
        (args.model_dir / "README.md").write_text(render_card(args.model_dir, rows), "utf-8")
    print(accuracy_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
