"""Build a small LoRA adapter for the bundled test model, for tests of `--adapter`.

PEFT initialises LoRA's B matrix to zeros, which makes a fresh adapter a no-op: nothing would
show that an engine applied it. This one draws both matrices at random (a fixed seed), on the
language model's q_proj and v_proj as ms-swift's default LoRA training targets, so an engine
that serves it answers differently from the base model.

Usage::

    python -m tools.make_test_lora OUT [--rank 8] [--seed 0] [--model models/tiny-qwen3-vl]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tools.arguments import model_folder

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO_ROOT / "models" / "tiny-qwen3-vl"


def make_lora(out: Path, *, model: Path = DEFAULT_MODEL, rank: int = 8, seed: int = 0) -> Path:
    """Write a random LoRA adapter of `model` to `out`; the folder."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(seed)
    base = AutoModelForImageTextToText.from_pretrained(model, dtype=torch.float32)
    config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        # The language model's attention only: the vision tower names its projection qkv.
        target_modules=r".*language_model.*\.(q_proj|v_proj)",
        init_lora_weights=False,  # random A and B: the adapter changes the answers
    )
    adapted = get_peft_model(base, config)
    adapted.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to write the adapter to")
    parser.add_argument("--model", type=model_folder, default=DEFAULT_MODEL)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(make_lora(args.out, model=args.model, rank=args.rank, seed=args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
