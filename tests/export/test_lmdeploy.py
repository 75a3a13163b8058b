"""Exported LMDeploy commands parse with lmdeploy's own `serve api_server` parser.

Runs only where lmdeploy is installed; it needs no GPU and never loads a model. lmdeploy's
own requirements (torch <= 2.12.1, triton, ray, CUDA wheels) are not needed for its parser, so
into the project's environment (which already has torch, transformers, pillow, pydantic):

    pip install --no-deps lmdeploy==0.18.0 fire termcolor mmengine-lite addict yapf \
        platformdirs shortuuid pybase64

takes about 20 s (a 106 MB download), 4 s from pip's cache; this module then runs in ~4 s.
In an empty venv add torch transformers pydantic numpy tqdm psutil requests pillow pyyaml
pytest (about 2 minutes with torch from the local wheel cache).
"""

from __future__ import annotations

import argparse
import importlib.util

import pytest

from autotune.export import render_export
from autotune.params import TrialConfig

if importlib.util.find_spec("lmdeploy") is None:
    pytest.skip("lmdeploy is not installed", allow_module_level=True)

MODEL = "/tmp/my models/it's $HOME"

CONFIGS = [
    TrialConfig(backend="lmdeploy"),
    TrialConfig(
        backend="lmdeploy",
        dtype="bfloat16",
        batch_size=64,
        kv_cache_fraction=0.55,
        do_sample=True,
        temperature=0.6,
        top_k=5,
        image_max_side=640,
    ),
    TrialConfig(backend="transformers", dtype="float16", compile_mode="default", batch_size=2),
    TrialConfig(backend="lmdeploy", dtype="bfloat16", compile_mode="default", tensor_parallel=2),
]


@pytest.fixture(scope="module")
def lmdeploy_cli() -> argparse.ArgumentParser:
    """The top-level `lmdeploy` parser, with `serve api_server` registered once."""
    # Imported here, not skipped on failure: an install that cannot import must fail loudly.
    from lmdeploy.cli.cli import CLI
    from lmdeploy.cli.serve import SubCliServe

    # The parsers are class attributes; registering api_server twice would be an error.
    if "api_server" not in SubCliServe.subparsers.choices:
        SubCliServe.add_parser_api_server()
    return CLI.parser


def api_server_options(cli: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    from lmdeploy.cli.serve import SubCliServe

    return SubCliServe.subparsers.choices["api_server"]._option_string_actions


def parse(cli: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    assert argv[:3] == ["lmdeploy", "serve", "api_server"]
    try:
        return cli.parse_args(argv[1:])
    except SystemExit:  # argparse reports the bad flag on stderr, which pytest shows
        pytest.fail(f"lmdeploy rejected: {argv}")


@pytest.mark.parametrize(
    "config", CONFIGS, ids=["default", "sampled", "from-transformers", "tensor-parallel"]
)
def test_every_flag_is_accepted_with_its_value(
    lmdeploy_cli: argparse.ArgumentParser, config: TrialConfig
) -> None:
    result = render_export(
        config,
        fmt="lmdeploy",
        model=MODEL,
        host="127.0.0.1",
        port=23456,
        served_model_name="qwen vl",
        session_len=8192,
    )
    options = api_server_options(lmdeploy_cli)
    for word in result.argv:
        if word.startswith("--"):
            assert word in options, f"{word} is not an lmdeploy serve api_server flag"

    ns = parse(lmdeploy_cli, result.argv)
    assert ns.model_path == MODEL
    assert ns.backend == "pytorch"
    assert ns.dtype == config.dtype
    assert ns.max_batch_size == config.batch_size
    expected_cache = 0.8 if config.kv_cache_fraction is None else config.kv_cache_fraction
    assert ns.cache_max_entry_count == pytest.approx(expected_cache)
    assert ns.session_len == 8192
    assert ns.server_name == "127.0.0.1"
    assert ns.server_port == 23456
    assert ns.model_name == "qwen vl"
    assert ns.eager_mode is ("--eager-mode" in result.argv)
    # compile_mode none is eager; any other value keeps LMDeploy's CUDA graphs on.
    assert ns.eager_mode is (config.compile_mode == "none")
    # A transformers trial has no tensor parallelism to carry over: LMDeploy's default, 1.
    assert ns.tp == (config.tensor_parallel if config.backend == "lmdeploy" else 1)


# The space-file pass-through a GPU study uses (search_spaces/default-gpu-quick.yaml).
ENGINE_ARGS = {
    "vision-max-batch-size": 16,
    "disable-fastapi-docs": True,
    "max-prefill-token-num": 4096,
    "session-len": 8192,
    "cudagraph-capture-batch-sizes": [1, 2, 4, 8, 16],
}


def test_engine_args_parse_with_their_values(lmdeploy_cli: argparse.ArgumentParser) -> None:
    config = TrialConfig(backend="lmdeploy", dtype="bfloat16", compile_mode="default")
    result = render_export(config, fmt="lmdeploy", model=MODEL, engine_args=ENGINE_ARGS)
    ns = parse(lmdeploy_cli, result.argv)
    assert ns.vision_max_batch_size == 16
    assert ns.disable_fastapi_docs is True
    assert ns.max_prefill_token_num == 4096
    assert ns.session_len == 8192
    assert ns.cudagraph_capture_batch_sizes == [1, 2, 4, 8, 16]
    assert ns.eager_mode is False


def test_unknown_flags_are_rejected(lmdeploy_cli: argparse.ArgumentParser) -> None:
    """The check above has teeth: the same parser refuses a flag it does not know."""
    with pytest.raises(SystemExit):
        lmdeploy_cli.parse_args(["serve", "api_server", MODEL, "--no-such-flag", "1"])


def test_dtype_choices_exclude_float32(lmdeploy_cli: argparse.ArgumentParser) -> None:
    """Why the lmdeploy export serves float32 trials as bfloat16 (and says so)."""
    choices = api_server_options(lmdeploy_cli)["--dtype"].choices
    assert "float32" not in choices
    assert {"auto", "float16", "bfloat16"} <= set(choices)


def test_quantisation_caches_and_adapters_parse(lmdeploy_cli: argparse.ArgumentParser) -> None:
    """FP8 weights (the -FP8 checkpoint), the prefix cache, a KV policy and adapters, as
    LMDeploy's own parser reads them."""
    from autotune.checkpoints.adapters import Adapter

    config = TrialConfig(backend="lmdeploy", weight_quant="fp8", prefix_cache=True, kv_quant="int8")
    result = render_export(
        config,
        fmt="lmdeploy",
        model=MODEL,
        quantized_models={"fp8": "Qwen/Qwen3-VL-2B-Instruct-FP8"},
        adapters=[Adapter("ocr", "/adapters/ocr", 8), Adapter("cap", "/adapters/cap", 16)],
    )
    ns = parse(lmdeploy_cli, result.argv)
    assert ns.model_path == "Qwen/Qwen3-VL-2B-Instruct-FP8"
    assert ns.enable_prefix_caching is True
    assert ns.quant_policy == 8
    assert ns.adapters == ["ocr=/adapters/ocr", "cap=/adapters/cap"]
    # Neither the KV policy nor the adapters are served for Qwen3-VL: not exact.
    assert result.exact is False
