"""engine_args in a space file: validated, normalised, refused when they shadow a parameter."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotune.backends import BACKENDS
from autotune.engine_args import EngineArgs, render_flags
from autotune.errors import SpaceError
from autotune.space import load_space

BASE = {
    "model": "some/model",
    "reference": {"dtype": "bfloat16"},
    "params": {"backend": {"choices": ["transformers", "lmdeploy"]}},
}


def space_with(tmp_path: Path, engine_args: object) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump({**BASE, "engine_args": engine_args}), encoding="utf-8")
    return path


def test_keys_are_normalised_per_format(tmp_path: Path) -> None:
    space = load_space(
        str(
            space_with(
                tmp_path,
                {
                    "lmdeploy": {"vision_max_batch_size": 16, "--disable-fastapi-docs": True},
                    "swift": {"max-pixels": 1000},
                },
            )
        )
    )
    assert space.engine_args.for_format("lmdeploy") == {
        "vision-max-batch-size": 16,
        "disable-fastapi-docs": True,
    }
    assert space.engine_args.for_format("swift") == {"max_pixels": 1000}
    assert space.engine_args.for_format("yaml") == {}
    # Stored with the study (space dump) in the same normalised form.
    dumped = space.model_dump(mode="json")["engine_args"]
    assert dumped["lmdeploy"]["vision-max-batch-size"] == 16


@pytest.mark.parametrize(
    ("fmt", "key", "owner"),
    [
        ("lmdeploy", "max-batch-size", "batch_size"),
        ("lmdeploy", "cache_max_entry_count", "kv_cache_fraction"),
        ("lmdeploy", "eager-mode", "compile_mode"),
        ("lmdeploy", "dtype", "dtype"),
        ("vllm", "enforce_eager", "compile_mode"),
        ("vllm", "max-num-seqs", "batch_size"),
        ("swift", "torch-dtype", "dtype"),
    ],
)
def test_a_key_that_duplicates_a_typed_parameter_is_one_line_error(
    tmp_path: Path, fmt: str, key: str, owner: str
) -> None:
    with pytest.raises(SpaceError) as info:
        load_space(str(space_with(tmp_path, {fmt: {key: 1}})))
    message = str(info.value)
    assert "\n" not in message
    assert "space.yaml" in message and f"engine_args.{fmt}" in message
    assert owner in message and "remove it from engine_args" in message


def test_unknown_format_and_bad_values_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(SpaceError, match="engine_args.tensorrt: unknown field"):
        load_space(str(space_with(tmp_path, {"tensorrt": {"x": 1}})))
    with pytest.raises(SpaceError, match="engine_args.lmdeploy"):
        load_space(str(space_with(tmp_path, {"lmdeploy": {"session-len": None}})))
    with pytest.raises(SpaceError, match="given twice"):
        load_space(str(space_with(tmp_path, {"lmdeploy": {"session-len": 1, "session_len": 2}})))


def test_render_flags_by_value_type() -> None:
    args = EngineArgs(
        lmdeploy={
            "max-prefill-token-num": 4096,
            "disable-fastapi-docs": True,
            "empty-init": False,
            "cudagraph-capture-batch-sizes": [1, 8],
            "hf-overrides": {"text_config": {"rope_theta": 1e6}},
        }
    ).for_format("lmdeploy")
    assert render_flags("lmdeploy", args) == [
        "--max-prefill-token-num", "4096",
        "--disable-fastapi-docs",
        "--cudagraph-capture-batch-sizes", "1", "8",
        "--hf-overrides", '{"text_config":{"rope_theta":1000000.0}}',
    ]  # fmt: skip
    assert render_flags("swift", {"stream": False}) == ["--stream", "false"]


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_reserved_flags_use_each_engines_spelling(name: str) -> None:
    backend = BACKENDS[name]
    other = "_" if backend.flag_separator == "-" else "-"
    assert all(other not in key for key in backend.reserved_flags), name


@pytest.mark.parametrize(
    ("fmt", "key"),
    [
        ("vllm", "max-num-seqs=256"),
        ("lmdeploy", "max-batch-size=64"),
        ("swift", "max_batch_size=8"),
        ("vllm", "--tensor-parallel-size=2"),
    ],
)
def test_a_key_with_its_value_after_equals_is_refused(tmp_path: Path, fmt: str, key: str) -> None:
    # `max-num-seqs=256: true` would render `--max-num-seqs=256` beside autotune's own flag.
    with pytest.raises(SpaceError) as info:
        load_space(str(space_with(tmp_path, {fmt: {key: True}})))
    message = str(info.value)
    assert f"engine_args.{fmt}" in message and "give the value as the key's value" in message
    flag, _, value = key.partition("=")
    assert f"({flag}: {value})" in message


@pytest.mark.parametrize("key", ["max num seqs", "tp\n", "a;b", "x$(id)", "é"])
def test_a_key_that_is_no_flag_name_is_refused(tmp_path: Path, key: str) -> None:
    with pytest.raises(SpaceError, match="engine_args.vllm") as info:
        load_space(str(space_with(tmp_path, {"vllm": {key: 1}})))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("value", ["--max-num-seqs", ["8", "--max-num-seqs", "256"]])
def test_a_value_that_is_a_flag_is_refused(tmp_path: Path, value: object) -> None:
    with pytest.raises(SpaceError, match="looks like a flag"):
        load_space(str(space_with(tmp_path, {"vllm": {"swap-space": value}})))


def test_dotted_and_dashed_flag_names_stay_allowed() -> None:
    args = EngineArgs(vllm={"--compilation-config.level": 3, "swap-space": -1})
    assert render_flags("vllm", args.for_format("vllm")) == [
        "--compilation-config.level", "3", "--swap-space", "-1",
    ]  # fmt: skip


def test_tensor_parallel_flags_belong_to_the_parameter(tmp_path: Path) -> None:
    """--tp in engine_args would give an engine GPUs autotune did not hand out."""
    for fmt, key in [("lmdeploy", "tp"), ("vllm", "tensor-parallel-size"), ("vllm", "-tp")]:
        with pytest.raises(SpaceError, match="tensor_parallel parameter"):
            load_space(str(space_with(tmp_path, {fmt: {key: 2}})))


@pytest.mark.parametrize(
    ("fmt", "key"),
    [
        ("swift", "adapters"),
        ("swift", "--vllm-enable-lora"),
        ("swift", "vllm_max_lora_rank"),
        ("lmdeploy", "adapters"),
        ("vllm", "lora-modules"),
        ("vllm", "enable_lora"),
    ],
)
def test_an_adapter_the_trials_did_not_measure_cannot_ride_in_engine_args(
    tmp_path: Path, fmt: str, key: str
) -> None:
    """Served and exported, it would change the model every measured trial described."""
    with pytest.raises(SpaceError, match="--adapter NAME=PATH"):
        load_space(str(space_with(tmp_path, {fmt: {key: "ocr=/x"}})))
