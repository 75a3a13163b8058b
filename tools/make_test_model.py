"""Build a tiny Qwen3-VL checkpoint with random weights, for tests that need a real model folder.

The checkpoint uses the real architecture class (Qwen3VLForConditionalGeneration) at toy sizes, so
every serving engine runs the same code paths as for Qwen/Qwen3-VL-2B-Instruct, just fast enough
for a CPU. Everything an engine or ms-swift reads from the outside is kept real:

* the vocabulary size (151936) and Qwen's special-token ids (ms-swift hard-codes 151655 for
  <|image_pad|>, LMDeploy reads bos/eos/pad from text_config);
* the image geometry (patch 16, merge 2, temporal patch 2, so one LLM token covers 32x32 pixels)
  and the preprocessor / generation settings of the released model;
* the layout of config.json (legacy ``rope_scaling`` + ``rope_theta`` keys, as on the Hub).

The tokenizer is character-level: each of the 151643 ordinary ids decodes to exactly one character,
so even random output streams as text and prompts tokenize predictably.

Usage::

    python tools/make_test_model.py                # writes models/tiny-qwen3-vl
    python tools/make_test_model.py --out /tmp/m --seed 1 --dtype float32 --overwrite

The pieces are importable (a training script reuses them)::

    from tools.make_test_model import build_config, build_model, build_tokenizer, save_checkpoint
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models
from transformers import (
    GenerationConfig,
    PreTrainedTokenizerFast,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "models" / "tiny-qwen3-vl"

# --- Vocabulary -----------------------------------------------------------------------------

VOCAB_SIZE = 151936  # embedding rows, as in the real model (the tokenizer has fewer entries)
NUM_PLAIN_TOKENS = 151643  # ids 0..151642 are ordinary tokens, 151643.. are added tokens

ENDOFTEXT_ID = 151643  # bos and pad
IM_START_ID = 151644
IM_END_ID = 151645  # eos of the chat model
VISION_START_ID = 151652
VISION_END_ID = 151653
IMAGE_PAD_ID = 151655
VIDEO_PAD_ID = 151656

# Qwen3's added tokens at their real ids. The flag is Qwen's "special" bit: special tokens are
# dropped by skip_special_tokens, the tool/think markers are not (reasoning parsers need them).
QWEN_ADDED_TOKENS: tuple[tuple[int, str, bool], ...] = (
    (151643, "<|endoftext|>", True),
    (151644, "<|im_start|>", True),
    (151645, "<|im_end|>", True),
    (151646, "<|object_ref_start|>", True),
    (151647, "<|object_ref_end|>", True),
    (151648, "<|box_start|>", True),
    (151649, "<|box_end|>", True),
    (151650, "<|quad_start|>", True),
    (151651, "<|quad_end|>", True),
    (151652, "<|vision_start|>", True),
    (151653, "<|vision_end|>", True),
    (151654, "<|vision_pad|>", True),
    (151655, "<|image_pad|>", True),
    (151656, "<|video_pad|>", True),
    (151657, "<tool_call>", False),
    (151658, "</tool_call>", False),
    (151659, "<|fim_prefix|>", False),
    (151660, "<|fim_middle|>", False),
    (151661, "<|fim_suffix|>", False),
    (151662, "<|fim_pad|>", False),
    (151663, "<|repo_name|>", False),
    (151664, "<|file_sep|>", False),
    (151665, "<tool_response>", False),
    (151666, "</tool_response>", False),
    (151667, "<think>", False),
    (151668, "</think>", False),
)

# Code-point ranges (inclusive) that fill ids 0.. in this order. They are fixed ranges rather than
# a unicodedata query so that the vocabulary does not change with the Python version's Unicode
# database. Every range is assigned since Unicode 14, unchanged by NFC, and free of control
# characters, combining marks, surrogates and format characters (checked once by hand).
_CHAR_RANGES: tuple[tuple[int, int], ...] = (
    (0x0020, 0x007E),  # printable ASCII; space is a token of its own so "A B" round-trips
    (0x000A, 0x000A),  # "\n", "\t", "\r": the only controls kept, chat templates need "\n"
    (0x0009, 0x0009),
    (0x000D, 0x000D),
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs ("common CJK")
    (0x00A1, 0x00AC),  # Latin-1 Supplement without the soft hyphen U+00AD (a format character)
    (0x00AE, 0x00FF),
    (0x0100, 0x02AF),  # Latin Extended-A/B, IPA
    (0x0391, 0x03A1),  # Greek capitals (U+03A2 is unassigned)
    (0x03A3, 0x03A9),
    (0x03B1, 0x03C9),  # Greek small letters
    (0x0400, 0x0482),  # Cyrillic (U+0483..0489 are combining marks)
    (0x048A, 0x052F),
    (0x2190, 0x21FF),  # arrows
    (0x2200, 0x22FF),  # mathematical operators
    (0x2500, 0x25FF),  # box drawing, block elements, geometric shapes
    (0x2600, 0x26FF),  # miscellaneous symbols
    (0x3001, 0x3029),  # CJK punctuation (U+302A..302F are combining marks)
    (0x3041, 0x3096),  # Hiragana
    (0x30A1, 0x30FA),  # Katakana
    (0xFF01, 0xFF5E),  # fullwidth ASCII forms
    (0x3400, 0x4DBF),  # CJK Extension A
    (0xAC00, 0xD7A3),  # Hangul syllables
    (0xA000, 0xA48C),  # Yi syllables
    (0x1F300, 0x1F64F),  # pictographs and emoticons
    (0x20000, 0x2A6DF),  # CJK Extension B
    (0x2A700, 0x2B738),  # CJK Extension C
    (0x2B740, 0x2B81D),  # CJK Extension D
    (0x2B820, 0x2CEA1),  # CJK Extension E
    (0x2CEB0, 0x2EBE0),  # CJK Extension F
    (0x30000, 0x3134A),  # CJK Extension G
    (0x17000, 0x187F7),  # Tangut
    (0x18800, 0x18CD5),  # Tangut components, Khitan small script
    (0x1B170, 0x1B2FB),  # Nushu
    (0x13000, 0x1342E),  # Egyptian hieroglyphs
    (0x12000, 0x12399),  # Cuneiform
)
# Assigned graphic characters run out before 151643 ids (Unicode has about 142k), so the rest
# comes from the private-use planes: still one non-empty character per id.
_PRIVATE_USE_RANGES: tuple[tuple[int, int], ...] = ((0xE000, 0xF8FF), (0xF0000, 0xFFFFD))

# --- Model geometry kept from the real checkpoint ---------------------------------------------

PATCH_SIZE = 16
SPATIAL_MERGE_SIZE = 2
TEMPORAL_PATCH_SIZE = 2
NUM_POSITION_EMBEDDINGS = 2304  # 48x48 learned grid, interpolated per image
MAX_POSITION_EMBEDDINGS = 262144
ROPE_THETA = 5_000_000.0
REAL_MROPE_SECTION = (24, 20, 20)  # for head_dim 128 (64 rotary frequencies)

# Chat template in the shape of Qwen3-VL's: turns are "<|im_start|>role\n...<|im_end|>\n", an image
# part renders as <|vision_start|><|image_pad|><|vision_end|> (the processor widens <|image_pad|>
# to one token per 32x32 pixels), no default system prompt. Content may be a string or a list of
# OpenAI/transformers-style parts. Tool calls and thinking are not rendered.
CHAT_TEMPLATE = """\
{%- set vision = namespace(images=0, videos=0) -%}
{%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\\n' -}}
{%- set content = message['content'] if message['content'] is defined else none -%}
{%- if content is string -%}
{{- content -}}
{%- elif content is not none -%}
{%- for part in content -%}
{%- if part is string -%}
{{- part -}}
{%- elif part['type'] in ['image', 'image_url'] or 'image' in part or 'image_url' in part -%}
{%- set vision.images = vision.images + 1 -%}
{%- if add_vision_id -%}{{- 'Picture ' ~ vision.images ~ ': ' -}}{%- endif -%}
{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}
{%- elif part['type'] in ['video', 'video_url'] or 'video' in part or 'video_url' in part -%}
{%- set vision.videos = vision.videos + 1 -%}
{%- if add_vision_id -%}{{- 'Video ' ~ vision.videos ~ ': ' -}}{%- endif -%}
{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}
{%- elif 'text' in part -%}
{{- part['text'] -}}
{%- endif -%}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\\n' -}}
{%- endif -%}
"""


# --- Config -----------------------------------------------------------------------------------


def mrope_section(head_dim: int) -> list[int]:
    """Split head_dim/2 rotary frequencies into (T, H, W) like the real [24, 20, 20].

    transformers interleaves the sections (THWTHW...): H takes every third frequency from index
    1 and W from index 2, up to 3x their size, and T keeps the rest. H and W therefore get
    5/16 of the frequencies each, as in the real model, which always fits the interleaving.
    """
    if head_dim % 2 or head_dim < 8:
        raise ValueError(f"head_dim must be even and at least 8, got {head_dim}")
    half = head_dim // 2
    spatial = half * REAL_MROPE_SECTION[1] // sum(REAL_MROPE_SECTION)
    return [half - 2 * spatial, spatial, spatial]


def _check_sizes(
    text_heads: int,
    text_kv_heads: int,
    vision_hidden_size: int,
    vision_heads: int,
    deepstack: Sequence[int],
    vision_depth: int,
    text_layers: int,
) -> None:
    """Reject sizes the modeling code would only fail on later, with a clearer message."""
    if text_heads % text_kv_heads:
        raise ValueError(
            f"text heads ({text_heads}) must be a multiple of kv heads {text_kv_heads}"
        )
    if vision_hidden_size % vision_heads or (vision_hidden_size // vision_heads) % 4:
        # The vision rotary embedding splits each head into quarters (2D, sin/cos).
        raise ValueError("vision hidden size / heads must be a whole number divisible by 4")
    if not deepstack or any(not 0 <= i < vision_depth for i in deepstack):
        raise ValueError(f"deepstack indexes {list(deepstack)} must lie in 0..{vision_depth - 1}")
    if len(deepstack) > text_layers:
        # Deepstack features are added to the first len(indexes) decoder layers.
        raise ValueError(f"{len(deepstack)} deepstack levels need at least as many text layers")


def build_config(
    *,
    text_hidden_size: int = 32,
    text_layers: int = 2,
    text_heads: int = 4,
    text_kv_heads: int = 2,
    head_dim: int = 16,
    text_intermediate_size: int | None = None,
    vision_hidden_size: int = 64,
    vision_depth: int = 2,
    vision_heads: int = 4,
    vision_intermediate_size: int | None = None,
    deepstack_visual_indexes: Sequence[int] | None = None,
    init_std: float = 0.02,
) -> Qwen3VLConfig:
    """The tiny Qwen3VLConfig: toy widths and depths, real vocabulary, ids and image geometry.

    Intermediate sizes default to 4x the hidden size (powers of two for the defaults).
    Deepstack defaults to the first min(depth, text layers, 3) vision blocks (the real model
    taps 3 of its 24 blocks). init_std is the std of the random weights: at the usual 0.02
    the tied embedding dominates and greedy output repeats one character; about 0.2 gives
    varied characters.
    """
    if deepstack_visual_indexes is None:
        deepstack_visual_indexes = list(range(min(vision_depth, text_layers, 3)))
    deepstack = [int(i) for i in deepstack_visual_indexes]
    _check_sizes(
        text_heads,
        text_kv_heads,
        vision_hidden_size,
        vision_heads,
        deepstack,
        vision_depth,
        text_layers,
    )
    text_config: dict[str, Any] = {
        "vocab_size": VOCAB_SIZE,
        "hidden_size": text_hidden_size,
        "intermediate_size": text_intermediate_size or 4 * text_hidden_size,
        "num_hidden_layers": text_layers,
        "num_attention_heads": text_heads,
        "num_key_value_heads": text_kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITION_EMBEDDINGS,
        "rms_norm_eps": 1e-6,
        "attention_bias": False,
        "attention_dropout": 0.0,
        # Legacy spelling, as in the released config.json; transformers 5 turns it into
        # rope_parameters. transformers always interleaves and ignores mrope_interleaved;
        # it is kept for engines with their own rope code (vLLM reads it).
        "rope_scaling": {
            "rope_type": "default",
            "mrope_section": mrope_section(head_dim),
            "mrope_interleaved": True,
        },
        "rope_theta": ROPE_THETA,
        # LMDeploy's model check reads these from text_config, not from the top level.
        "bos_token_id": ENDOFTEXT_ID,
        "eos_token_id": IM_END_ID,
        "pad_token_id": ENDOFTEXT_ID,
        "tie_word_embeddings": True,
        "use_cache": True,
        "initializer_range": init_std,
    }
    vision_config: dict[str, Any] = {
        "depth": vision_depth,
        "hidden_size": vision_hidden_size,
        "intermediate_size": vision_intermediate_size or 4 * vision_hidden_size,
        "num_heads": vision_heads,
        "hidden_act": "gelu_pytorch_tanh",
        "in_channels": 3,
        "patch_size": PATCH_SIZE,
        "spatial_merge_size": SPATIAL_MERGE_SIZE,
        "temporal_patch_size": TEMPORAL_PATCH_SIZE,
        "out_hidden_size": text_hidden_size,  # the merger projects into the LM's width
        "num_position_embeddings": NUM_POSITION_EMBEDDINGS,
        "deepstack_visual_indexes": deepstack,
        "initializer_range": init_std,
    }
    return Qwen3VLConfig(
        text_config=text_config,
        vision_config=vision_config,
        image_token_id=IMAGE_PAD_ID,
        video_token_id=VIDEO_PAD_ID,
        vision_start_token_id=VISION_START_ID,
        vision_end_token_id=VISION_END_ID,
        tie_word_embeddings=True,
    )


def release_layout(config_dict: dict[str, Any]) -> dict[str, Any]:
    """Rewrite a transformers-5 config dict into the layout of the released config.json.

    transformers 5 saves ``rope_parameters`` (and a default vision rope entry); the Hub file
    has ``rope_scaling`` + ``rope_theta`` in text_config and no vision rope key. Engines that
    read config.json directly then see the same shape as for the real model, and every
    transformers version that supports Qwen3-VL reads it.
    """
    out = copy.deepcopy(config_dict)
    text = out["text_config"]
    rope = dict(text.pop("rope_parameters", None) or {})
    if rope:
        text["rope_theta"] = rope.pop("rope_theta", ROPE_THETA)
        text["rope_scaling"] = rope
    vision = out["vision_config"]
    if vision.get("rope_parameters", {}).get("rope_type") == "axial":
        del vision["rope_parameters"]  # the class default; the Hub file does not spell it out
    if "dtype" in out:
        text.setdefault("dtype", out["dtype"])  # the Hub file has it in text_config
    return out


def build_generation_config() -> GenerationConfig:
    """The released model's generation_config.json (sampling defaults, two eos ids)."""
    return GenerationConfig(
        bos_token_id=ENDOFTEXT_ID,
        pad_token_id=ENDOFTEXT_ID,
        eos_token_id=[IM_END_ID, ENDOFTEXT_ID],
        do_sample=True,
        temperature=0.7,
        top_p=0.8,
        top_k=20,
        repetition_penalty=1.0,
    )


# --- Tokenizer --------------------------------------------------------------------------------


def _code_points() -> Iterator[int]:
    for start, end in (*_CHAR_RANGES, *_PRIVATE_USE_RANGES):
        yield from range(start, end + 1)


def character_table() -> list[str]:
    """The 151643 characters of ids 0..151642, in id order (deterministic, no duplicates)."""
    seen: set[int] = set()
    chars: list[str] = []
    for cp in _code_points():
        if cp not in seen:
            seen.add(cp)
            chars.append(chr(cp))
        if len(chars) == NUM_PLAIN_TOKENS:
            return chars
    raise RuntimeError(f"the code-point ranges give only {len(chars)} characters")


def build_char_tokenizer() -> Tokenizer:
    """A `tokenizers` Tokenizer: one id per character, Qwen's added tokens at their real ids.

    A BPE model with no merges never joins characters, and without a pre-tokenizer or
    normalizer the text is not split or altered (spaces stay tokens). The Fuse decoder joins
    tokens with nothing in between; the default decoder would insert spaces. Characters outside
    the table are dropped (there is no unknown token, as in Qwen's tokenizer).
    """
    vocab = {ch: i for i, ch in enumerate(character_table())}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None))
    tokenizer.decoder = decoders.Fuse()
    for token_id, content, special in QWEN_ADDED_TOKENS:
        # Added tokens take the next free id, so adding them in id order puts each at its real
        # id; the check below turns a mismatch into an error instead of a silent shift.
        token = AddedToken(content, special=special, normalized=False)
        if special:
            tokenizer.add_special_tokens([token])
        else:
            tokenizer.add_tokens([token])
        if tokenizer.token_to_id(content) != token_id:
            got = tokenizer.token_to_id(content)
            raise RuntimeError(f"{content} landed at id {got}, not at {token_id}")
    return tokenizer


def tokenizer_config() -> dict[str, Any]:
    """tokenizer_config.json, modelled on Qwen's (no bos, eos <|im_end|>, pad <|endoftext|>).

    tokenizer_class is PreTrainedTokenizerFast, not Qwen2Tokenizer: transformers 5's
    Qwen2Tokenizer rebuilds its byte-level pipeline around the vocabulary (tried: a space
    became id 21216 and "中文" six byte tokens); the generic class uses tokenizer.json as is.
    """
    return {
        "added_tokens_decoder": {
            str(token_id): {
                "content": content,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": special,
            }
            for token_id, content, special in QWEN_ADDED_TOKENS
        },
        "add_bos_token": False,
        "bos_token": None,
        "clean_up_tokenization_spaces": False,  # would turn "a ," into "a," when decoding
        "eos_token": "<|im_end|>",
        "model_max_length": MAX_POSITION_EMBEDDINGS,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The transformers tokenizer of the checkpoint (character-level, with the chat template)."""
    settings = tokenizer_config()
    return PreTrainedTokenizerFast(
        tokenizer_object=build_char_tokenizer(),
        eos_token=settings["eos_token"],
        pad_token=settings["pad_token"],
        model_max_length=settings["model_max_length"],
        clean_up_tokenization_spaces=False,
        chat_template=CHAT_TEMPLATE,
    )


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, out_dir: Path) -> None:
    """Write tokenizer.json and tokenizer_config.json.

    The files are written directly rather than with save_pretrained, whose output format
    changes between transformers releases; these two files load the same in all of them.
    """
    # Compact JSON: the 151643-entry vocabulary is about 1 MB smaller than pretty-printed.
    tokenizer.backend_tokenizer.save(str(out_dir / "tokenizer.json"), pretty=False)
    _write_json(out_dir / "tokenizer_config.json", tokenizer_config())


# --- Processor files ----------------------------------------------------------------------------


def image_processor_config(min_pixels: int = 65536) -> dict[str, Any]:
    """preprocessor_config.json of the released model (min/max pixels = 65536 / 16777216);
    a smaller `min_pixels` lets a small image cost fewer vision tokens."""
    return {
        "image_processor_type": "Qwen2VLImageProcessorFast",
        "processor_class": "Qwen3VLProcessor",
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "merge_size": SPATIAL_MERGE_SIZE,
        "patch_size": PATCH_SIZE,
        "resample": 3,
        "rescale_factor": 1 / 255,
        "size": {"longest_edge": 16777216, "shortest_edge": min_pixels},
        "temporal_patch_size": TEMPORAL_PATCH_SIZE,
    }


def video_processor_config() -> dict[str, Any]:
    """video_preprocessor_config.json of the released model (AutoProcessor needs it)."""
    return {
        "video_processor_type": "Qwen3VLVideoProcessor",
        "processor_class": "Qwen3VLProcessor",
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "do_sample_frames": True,
        "fps": 2,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "max_frames": 768,
        "merge_size": SPATIAL_MERGE_SIZE,
        "min_frames": 4,
        "patch_size": PATCH_SIZE,
        "resample": 3,
        "rescale_factor": 1 / 255,
        "size": {"longest_edge": 25165824, "shortest_edge": 4096},
        "temporal_patch_size": TEMPORAL_PATCH_SIZE,
    }


def write_processor_files(out_dir: Path, *, min_pixels: int = 65536) -> None:
    """Write the image/video preprocessor configs and chat_template.jinja.

    With these, the tokenizer files and config.json (model_type qwen3_vl), AutoProcessor
    builds a Qwen3VLProcessor. chat_template.jinja is where transformers 5 looks for the
    template of both the tokenizer and the processor, so it lives in one place only.
    """
    _write_json(out_dir / "preprocessor_config.json", image_processor_config(min_pixels))
    _write_json(out_dir / "video_preprocessor_config.json", video_processor_config())
    (out_dir / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")


# --- Model and checkpoint ---------------------------------------------------------------------


def silenced_token_ids() -> list[int]:
    """Ids a random model should never emit: whitespace characters and every id >= 151643.

    Added tokens include eos (generation would stop early) and 151669..151935 have no text at
    all; whitespace-only output looks empty to a client that strips it.
    """
    whitespace = [i for i, ch in enumerate(character_table()) if ch.isspace()]
    return whitespace + list(range(NUM_PLAIN_TOKENS, VOCAB_SIZE))


def build_model(
    config: Qwen3VLConfig, *, seed: int = 0, silence_tokens: bool = True
) -> Qwen3VLForConditionalGeneration:
    """Random-weight model (float32, eval mode), deterministic for a given seed.

    With silence_tokens, the embedding rows of silenced_token_ids() are zeroed. The embedding
    is tied to lm_head, so those ids get a logit of exactly 0 while ordinary ids get random
    positive and negative ones: greedy decoding never picks them, so a test generation always
    runs to max_new_tokens and streams non-whitespace characters. (Sampling with top_k, as in
    the generation config, never reaches a logit of 0 either; without top_k it rarely can.)
    As inputs, the zero rows are harmless for a model that has learnt nothing.
    """
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config)
    if silence_tokens:
        with torch.no_grad():
            model.get_input_embeddings().weight[silenced_token_ids()] = 0.0
    return model.eval()


def save_checkpoint(
    model: Qwen3VLForConditionalGeneration,
    tokenizer: PreTrainedTokenizerFast,
    out_dir: Path | str,
    *,
    dtype: torch.dtype = torch.bfloat16,
    min_pixels: int = 65536,
) -> None:
    """Write a complete, loadable checkpoint folder (weights in `dtype`, configs, tokenizer).

    The caller's model is left as it is: a copy is cast when `dtype` differs. `min_pixels`:
    the processor's smallest image (the released model's 65536 unless a caller trained on less).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    to_save = model if model.dtype == dtype else copy.deepcopy(model).to(dtype)
    to_save.generation_config = build_generation_config()
    to_save.save_pretrained(out_dir)  # model.safetensors (lm_head tied, not stored twice)
    config_path = out_dir / "config.json"
    _write_json(config_path, release_layout(json.loads(config_path.read_text(encoding="utf-8"))))
    save_tokenizer(tokenizer, out_dir)
    write_processor_files(out_dir, min_pixels=min_pixels)
    for path in out_dir.iterdir():
        # save_pretrained leaves model.safetensors owner-only (0600); engines in containers
        # or under another user must be able to read every file.
        path.chmod(0o644)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(
        json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8"
    )


def folder_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# --- CLI --------------------------------------------------------------------------------------

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def _int_list(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="checkpoint folder")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--init-std",
        type=float,
        default=0.02,
        help="std of the random weights (0.02: greedy output repeats one character; 0.2: varied)",
    )
    parser.add_argument(
        "--dtype", choices=sorted(_DTYPES), default="bfloat16", help="dtype of the saved weights"
    )
    parser.add_argument("--text-hidden-size", type=int, default=32)
    parser.add_argument("--text-layers", type=int, default=2)
    parser.add_argument("--text-heads", type=int, default=4)
    parser.add_argument("--text-kv-heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=16)
    parser.add_argument(
        "--text-intermediate-size", type=int, default=None, help="default: 4x text hidden size"
    )
    parser.add_argument("--vision-hidden-size", type=int, default=64)
    parser.add_argument("--vision-depth", type=int, default=2)
    parser.add_argument("--vision-heads", type=int, default=4)
    parser.add_argument(
        "--vision-intermediate-size", type=int, default=None, help="default: 4x vision hidden size"
    )
    parser.add_argument(
        "--deepstack-indexes",
        type=_int_list,
        default=None,
        help="comma-separated vision block indexes, e.g. 0,1 (default: the first"
        " min(depth, text layers, 3) blocks)",
    )
    return parser


def _prepare_out_dir(out_dir: Path, overwrite: bool) -> None:
    """Refuse to write into a non-empty folder unless asked, so stale files never mix in."""
    if out_dir.exists() and any(out_dir.iterdir()):
        if not overwrite:
            raise SystemExit(f"{out_dir} is not empty; pass --overwrite to replace it")
        if not (out_dir / "config.json").is_file():
            raise SystemExit(f"{out_dir} does not look like a checkpoint; not deleting it")
        shutil.rmtree(out_dir)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = build_config(
            text_hidden_size=args.text_hidden_size,
            text_layers=args.text_layers,
            text_heads=args.text_heads,
            text_kv_heads=args.text_kv_heads,
            head_dim=args.head_dim,
            text_intermediate_size=args.text_intermediate_size,
            vision_hidden_size=args.vision_hidden_size,
            vision_depth=args.vision_depth,
            vision_heads=args.vision_heads,
            vision_intermediate_size=args.vision_intermediate_size,
            deepstack_visual_indexes=args.deepstack_indexes,
            init_std=args.init_std,
        )
    except ValueError as error:  # a bad size combination: a usage error, not a crash
        parser.error(str(error))
    _prepare_out_dir(args.out, args.overwrite)
    model = build_model(config, seed=args.seed)
    save_checkpoint(model, build_tokenizer(), args.out, dtype=_DTYPES[args.dtype])
    params = sum(p.numel() for p in model.parameters())  # tied lm_head counted once
    size = folder_size(args.out)
    print(f"wrote {args.out}: {params:,} parameters, {size / 1e6:.2f} MB ({size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
