"""Export: each target's argv, shell quoting, refusals, notes, and the YAML round trip."""

from __future__ import annotations

import dataclasses
import json
import shlex

import pytest
import yaml

from autotune.checkpoints.geometry import ImageGeometry
from autotune.errors import ExportError
from autotune.export import FORMATS, render_export
from autotune.params import TrialConfig

MODEL = "Qwen/Qwen3-VL-2B-Instruct"
ODD_MODEL = "/tmp/my models/it's $HOME"
COMMAND_FORMATS = ("swift", "lmdeploy", "vllm")

GREEDY = TrialConfig(
    backend="swift", dtype="bfloat16", max_batch_size=8, batch_size=4, max_new_tokens=128
)
SAMPLING = TrialConfig(
    backend="vllm",
    batch_size=32,
    kv_cache_fraction=0.85,
    do_sample=True,
    temperature=0.7,
    top_k=20,
    top_p=0.8,
    repetition_penalty=1.05,
    seed=7,
)
COMPILED = TrialConfig(backend="transformers", compile_mode="reduce-overhead", image_max_side=1000)
LMDEPLOY = TrialConfig(
    backend="lmdeploy", dtype="float16", kv_cache_fraction=0.6, max_batch_size=64, batch_size=16
)
# The pinned image bounds of Qwen3-VL's released processor (64 to 16384 tokens).
PINNED = {"IMAGE_MIN_TOKEN_NUM": "64", "IMAGE_MAX_TOKEN_NUM": "16384"}

CONFIGS = [GREEDY, SAMPLING, COMPILED, LMDEPLOY]


def flag(argv: list[str], name: str) -> str:
    """The value after `name`; fails when the flag is missing or repeated."""
    assert argv.count(name) == 1, f"{name} appears {argv.count(name)} times in {argv}"
    return argv[argv.index(name) + 1]


def command_words(text: str) -> list[str]:
    """What a POSIX shell would run: comment lines dropped, the rest split as the shell does."""
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(lines) == 1, lines
    return shlex.split(lines[0])


# swift


def test_swift_greedy_argv_is_the_launch_alone() -> None:
    result = render_export(GREEDY, fmt="swift", model=MODEL, port=8000, served_model_name="qwen")
    # Launch-time values only: decoding, max tokens and the image size travel per request.
    assert result.argv == [
        "swift", "deploy", "--model", MODEL,
        "--model_type", "qwen3_vl", "--template", "qwen3_vl",
        "--infer_backend", "transformers",
        "--torch_dtype", "bfloat16",
        "--attn_impl", "sdpa",
        "--max_batch_size", "8",
        "--host", "0.0.0.0", "--port", "8000",
        "--served_model_name", "qwen",
    ]  # fmt: skip
    assert result.exact
    assert result.env == PINNED
    assert result.request == {"max_tokens": 128, "temperature": 0, "repetition_penalty": 1.0}
    assert any(json.dumps(result.request, separators=(",", ":")) in n for n in result.notes)
    assert any("4 request(s) in flight" in n for n in result.notes)


def test_trials_of_one_launch_export_one_command() -> None:
    other = GREEDY.model_copy(update={"batch_size": 1, "image_max_side": 512, "max_new_tokens": 8})
    for fmt in COMMAND_FORMATS:
        base = GREEDY.model_copy(update={"backend": "vllm" if fmt == "vllm" else "swift"})
        one = render_export(base, fmt=fmt, model=MODEL)
        two = render_export(
            other.model_copy(update={"backend": base.backend}), fmt=fmt, model=MODEL
        )
        assert (one.argv, one.env) == (two.argv, two.env), fmt
        assert one.request != two.request


def test_swift_sampling_on_vllm_engine() -> None:
    result = render_export(SAMPLING, fmt="swift", model=MODEL, session_len=8192)
    argv = result.argv
    assert flag(argv, "--infer_backend") == "vllm"
    assert flag(argv, "--vllm_max_num_seqs") == "32"
    assert flag(argv, "--vllm_gpu_memory_utilization") == "0.85"
    assert flag(argv, "--vllm_max_model_len") == "8192"
    assert json.loads(flag(argv, "--vllm_limit_mm_per_prompt")) == {"image": 1, "video": 0}
    # dtype auto: ms-swift reads config.json when --torch_dtype is absent.
    assert "--torch_dtype" not in argv
    # --max_batch_size and --attn_impl only drive the transformers engine.
    assert "--max_batch_size" not in argv and "--attn_impl" not in argv
    assert "--port" not in argv and "--temperature" not in argv
    # measured with `vllm serve`, served here by ms-swift's vLLM engine
    assert not result.exact
    assert any("'vllm'" in note for note in result.notes)
    assert result.request == {
        "max_tokens": 64,
        "temperature": 0.7,
        "top_k": 20,
        "top_p": 0.8,
        "seed": 7,
        "repetition_penalty": 1.05,
    }


def test_swift_sampling_with_unset_knobs_leaves_them_to_the_checkpoint() -> None:
    config = TrialConfig(backend="swift", do_sample=True, top_p=0.9)
    result = render_export(config, fmt="swift", model=MODEL)
    assert result.request["top_p"] == 0.9
    assert "temperature" not in result.request and "top_k" not in result.request
    assert any("generation_config" in note for note in result.notes)


def test_swift_compile_is_not_exact_and_says_why() -> None:
    result = render_export(COMPILED, fmt="swift", model=MODEL)
    assert not result.exact
    assert any("torch.compile" in note for note in result.notes)
    assert "compile" not in " ".join(result.argv)


def test_swift_in_process_greedy_trial_is_exact_sampled_is_not() -> None:
    greedy = TrialConfig(backend="transformers", dtype="float32", batch_size=4)
    result = render_export(greedy, fmt="swift", model=MODEL)
    assert result.exact
    assert flag(result.argv, "--max_batch_size") == "4"  # the static batch it ran
    assert any("in-process" in note for note in result.notes)
    sampled = greedy.model_copy(update={"do_sample": True, "temperature": 0.5})
    assert not render_export(sampled, fmt="swift", model=MODEL).exact


def test_swift_pins_the_checkpoint_image_bounds_and_notes_the_client_resize() -> None:
    geometry = ImageGeometry(factor=32, min_pixels=32 * 32 * 4, max_pixels=32 * 32 * 1280)
    result = render_export(COMPILED, fmt="swift", model=MODEL, image_geometry=geometry)
    assert result.env == {"IMAGE_MIN_TOKEN_NUM": "4", "IMAGE_MAX_TOKEN_NUM": "1280"}
    assert any("longest side 1000" in note for note in result.notes)
    assert result.command.startswith("IMAGE_MIN_TOKEN_NUM=4 IMAGE_MAX_TOKEN_NUM=1280 swift ")


def test_without_image_cap_there_is_no_image_note() -> None:
    for fmt in COMMAND_FORMATS:
        config = GREEDY.model_copy(update={"backend": "vllm" if fmt == "vllm" else "swift"})
        result = render_export(config, fmt=fmt, model=MODEL)
        assert not any("longest side" in note for note in result.notes)


def test_swift_refuses_lmdeploy_trials_in_one_line() -> None:
    with pytest.raises(ExportError) as info:
        render_export(LMDEPLOY, fmt="swift", model=MODEL)
    message = str(info.value)
    assert "--format lmdeploy" in message
    assert "\n" not in message


# lmdeploy


def test_lmdeploy_argv_and_per_request_greedy() -> None:
    result = render_export(
        LMDEPLOY, fmt="lmdeploy", model=MODEL, port=23333, served_model_name="q", session_len=4096
    )
    assert result.argv == [
        "lmdeploy", "serve", "api_server", MODEL,
        "--backend", "pytorch",
        "--dtype", "float16",
        "--max-batch-size", "64",
        "--cache-max-entry-count", "0.6",
        "--eager-mode",
        "--session-len", "4096",
        "--server-name", "0.0.0.0", "--server-port", "23333",
        "--model-name", "q",
    ]  # fmt: skip
    assert result.exact
    # top_k 1 is LMDeploy's greedy path; its server always sets do_sample.
    assert result.request == {"max_completion_tokens": 64, "top_k": 1, "repetition_penalty": 1.0}
    assert any(json.dumps(result.request, separators=(",", ":")) in n for n in result.notes)


def test_lmdeploy_sampling_goes_in_the_request_and_the_image_size_in_a_note() -> None:
    config = SAMPLING.model_copy(update={"image_max_side": 768})
    result = render_export(config, fmt="lmdeploy", model=MODEL)
    assert result.request == {
        "max_completion_tokens": 64,
        "temperature": 0.7,
        "top_k": 20,
        "top_p": 0.8,
        "seed": 7,
        "repetition_penalty": 1.05,
    }
    assert any("longest side 768" in note for note in result.notes)
    assert flag(result.argv, "--dtype") == "auto"
    assert not result.exact  # measured on vLLM


def test_lmdeploy_float32_serves_bfloat16_and_says_so() -> None:
    export = render_export(
        TrialConfig(backend="lmdeploy", dtype="float32"), fmt="lmdeploy", model=MODEL
    )
    assert export.argv[export.argv.index("--dtype") + 1] == "bfloat16"
    assert not export.exact
    assert any("cannot run float32" in note for note in export.notes)


def test_lmdeploy_notes_what_has_no_flag() -> None:
    config = TrialConfig(
        backend="lmdeploy", compile_mode="max-autotune", attn_implementation="flash_attention_2"
    )
    result = render_export(config, fmt="lmdeploy", model=MODEL)
    assert "--eager-mode" not in result.argv
    assert any("compile_mode" in note and "CUDA graphs" in note for note in result.notes)
    assert any("flash_attention_2" in note for note in result.notes)


@pytest.mark.parametrize(
    ("fmt", "eager_flag"), [("lmdeploy", "--eager-mode"), ("vllm", "--enforce-eager")]
)
@pytest.mark.parametrize("mode", ["none", "default", "reduce-overhead", "max-autotune"])
def test_compile_mode_none_is_eager_and_anything_else_is_cuda_graphs(
    fmt: str, eager_flag: str, mode: str
) -> None:
    config = TrialConfig(backend=fmt, dtype="bfloat16", compile_mode=mode)
    result = render_export(config, fmt=fmt, model=MODEL)
    assert (eager_flag in result.argv) == (mode == "none")
    assert result.exact  # both are what the trial ran
    if mode == "default" or mode == "none":
        assert not any("compile_mode" in note for note in result.notes)


def test_swift_vllm_engine_maps_compile_mode_none_to_enforce_eager() -> None:
    eager = render_export(TrialConfig(backend="vllm"), fmt="swift", model=MODEL)
    assert flag(eager.argv, "--vllm_enforce_eager") == "true"
    graphs = render_export(
        TrialConfig(backend="vllm", compile_mode="default"), fmt="swift", model=MODEL
    )
    assert "--vllm_enforce_eager" not in graphs.argv
    assert not any("compile_mode" in note for note in graphs.notes)  # vLLM's graphs: no gap


LMDEPLOY_EXTRAS = {
    "vision-max-batch-size": 16,
    "disable_fastapi_docs": True,
    "max-prefill-token-num": 8192,
    "session-len": 8192,
    "log-level": "INFO",
}


def test_lmdeploy_engine_args_are_appended_as_flags() -> None:
    config = LMDEPLOY.model_copy(update={"compile_mode": "default"})
    result = render_export(
        config, fmt="lmdeploy", model=MODEL, engine_args={**LMDEPLOY_EXTRAS, "eager": False}
    )
    argv = result.argv
    assert flag(argv, "--vision-max-batch-size") == "16"
    assert "--disable-fastapi-docs" in argv  # a switch: no value after it
    assert argv[argv.index("--disable-fastapi-docs") + 1].startswith("--")
    assert flag(argv, "--max-prefill-token-num") == "8192"
    assert flag(argv, "--session-len") == "8192"
    assert flag(argv, "--log-level") == "INFO"
    assert "--eager" not in argv  # false switches are left out
    assert argv.index("--vision-max-batch-size") < argv.index("--server-name")


def test_engine_args_that_duplicate_a_typed_parameter_are_refused() -> None:
    with pytest.raises(ExportError, match="max_batch_size") as info:
        render_export(LMDEPLOY, fmt="lmdeploy", model=MODEL, engine_args={"max_batch_size": 4})
    assert "\n" not in str(info.value)
    with pytest.raises(ExportError, match="given twice"):
        render_export(
            LMDEPLOY, fmt="lmdeploy", model=MODEL, session_len=4096, engine_args=LMDEPLOY_EXTRAS
        )


def test_vllm_and_swift_engine_args() -> None:
    vllm = render_export(
        TrialConfig(backend="vllm"),
        fmt="vllm",
        model=MODEL,
        engine_args={"enable-chunked-prefill": True, "compilation_config": {"level": 3}},
    )
    assert "--enable-chunked-prefill" in vllm.argv
    assert json.loads(flag(vllm.argv, "--compilation-config")) == {"level": 3}
    swift = render_export(
        GREEDY, fmt="swift", model=MODEL, engine_args={"max-pixels": 1000, "stream": False}
    )
    assert flag(swift.argv, "--max_pixels") == "1000"
    assert flag(swift.argv, "--stream") == "false"


# vllm


def test_vllm_greedy_argv_is_the_launch_and_decoding_is_per_request() -> None:
    config = TrialConfig(
        backend="vllm", dtype="bfloat16", max_batch_size=16, batch_size=4, image_max_side=1000
    )
    result = render_export(config, fmt="vllm", model=MODEL, port=8001)
    argv = result.argv
    assert argv[:3] == ["vllm", "serve", MODEL]
    assert flag(argv, "--dtype") == "bfloat16"
    assert flag(argv, "--max-num-seqs") == "16"
    assert json.loads(flag(argv, "--limit-mm-per-prompt")) == {"image": 1, "video": 0}
    # The image size is a client-side resize; the checkpoint's processor stays as it is.
    assert "--mm-processor-kwargs" not in argv
    assert "--generation-config" not in argv and "--override-generation-config" not in argv
    assert "--seed" not in argv and "--gpu-memory-utilization" not in argv
    assert flag(argv, "--port") == "8001"
    assert "--enforce-eager" in argv  # compile_mode none: eager, as the trial ran
    assert result.request == {"max_tokens": 64, "temperature": 0, "repetition_penalty": 1.0}
    assert any("longest side 1000" in note for note in result.notes)
    assert result.exact


def test_vllm_sampling() -> None:
    result = render_export(SAMPLING, fmt="vllm", model=MODEL, served_model_name="qwen")
    argv = result.argv
    assert flag(argv, "--gpu-memory-utilization") == "0.85"
    assert flag(argv, "--served-model-name") == "qwen"
    assert result.request["seed"] == 7 and result.request["temperature"] == 0.7
    assert result.exact


def test_vllm_keeps_checkpoint_defaults_for_unset_sampling_knobs() -> None:
    config = TrialConfig(backend="vllm", do_sample=True, temperature=0.5)
    result = render_export(config, fmt="vllm", model=MODEL)
    assert "top_k" not in result.request and "top_p" not in result.request
    assert any("generation_config.json" in note for note in result.notes)


def test_vllm_compile_mode_is_a_note_not_a_flag() -> None:
    result = render_export(COMPILED, fmt="vllm", model=MODEL)
    assert not any("eager" in word or "compil" in word for word in result.argv)
    assert any("compile_mode" in note for note in result.notes)
    assert not result.exact  # measured in-process with transformers


# every format


@pytest.mark.parametrize("fmt", COMMAND_FORMATS)
@pytest.mark.parametrize("config", [GREEDY, SAMPLING, COMPILED], ids=["greedy", "sample", "cap"])
def test_text_survives_the_shell_with_an_odd_model_path(fmt: str, config: TrialConfig) -> None:
    result = render_export(config, fmt=fmt, model=ODD_MODEL, served_model_name="a b'$c")
    env_words = [f"{key}={value}" for key, value in result.env.items()]
    assert command_words(result.text) == [*env_words, *result.argv]
    assert ODD_MODEL in result.argv


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("config", CONFIGS, ids=["greedy", "sample", "compiled", "lmdeploy"])
def test_inexact_exports_always_say_why(fmt: str, config: TrialConfig) -> None:
    try:
        result = render_export(config, fmt=fmt, model=MODEL)
    except ExportError:
        return
    if not result.exact:
        assert result.notes
    assert json.loads(json.dumps(result.to_dict()))["exact"] is result.exact
    if result.notes:
        assert result.text.startswith("# note: ")


def test_notes_with_newlines_stay_comments() -> None:
    result = dataclasses.replace(
        render_export(GREEDY, fmt="swift", model=MODEL), notes=["first\nsecond line"]
    )
    lines = result.text.splitlines()
    assert lines[:2] == ["# note: first", "#   second line"]
    assert command_words(result.text)[2:4] == ["swift", "deploy"]  # after the pinned env


@pytest.mark.parametrize("config", CONFIGS, ids=["greedy", "sample", "compiled", "lmdeploy"])
def test_yaml_round_trips_to_the_same_config(config: TrialConfig) -> None:
    result = render_export(config, fmt="yaml", model=ODD_MODEL, port=9000)
    assert result.argv == [] and result.exact
    data = yaml.safe_load(result.text)
    assert TrialConfig(**data["config"]) == config
    assert data["model"] == ODD_MODEL
    assert data["backend"] == config.backend
    assert data["server"] == {"host": "0.0.0.0", "port": 9000}
    assert list(data["config"]) == list(TrialConfig.model_fields)


def test_unknown_format_suggests_the_closest() -> None:
    with pytest.raises(ExportError, match="Did you mean 'vllm'"):
        render_export(GREEDY, fmt="vlm", model=MODEL)


def test_bad_port_is_an_export_error() -> None:
    with pytest.raises(ExportError, match="port"):
        render_export(GREEDY, fmt="vllm", model=MODEL, port=70000)


@pytest.mark.parametrize(
    ("width", "height"), [(491, 139), (1920, 1080), (40, 30), (320, 320), (7000, 20)]
)
def test_geometry_puts_images_on_the_grid_within_the_bounds(width: int, height: int) -> None:
    geometry = ImageGeometry()
    w, h = geometry.grid_size(width, height)
    assert w % 32 == 0 and h % 32 == 0
    assert w * h <= geometry.max_pixels
    assert w * h >= geometry.min_pixels or max(w, h) == 32
    # An image already on the grid stays as it is: a processor resizes nothing more.
    assert geometry.grid_size(w, h) == (w, h)


# ms-swift's own parser


@pytest.mark.slow
@pytest.mark.swift
def test_swift_flags_are_deploy_arguments_fields() -> None:
    """Every flag we render is a DeployArguments field of the installed ms-swift, and parses."""
    pytest.importorskip("swift")
    from swift.arguments import DeployArguments
    from swift.model import MODEL_MAPPING
    from swift.template import TEMPLATE_MAPPING
    from swift.utils.utils import _patch_get_type_hints
    from transformers import HfArgumentParser

    # Parse with the parser `swift deploy` builds, without DeployArguments.__post_init__
    # (which would load the model).
    with _patch_get_type_hints():
        parser = HfArgumentParser([DeployArguments])
    fields = {field.name for field in dataclasses.fields(DeployArguments)}
    for config in (GREEDY, SAMPLING, COMPILED):
        result = render_export(
            config, fmt="swift", model=ODD_MODEL, port=8000, served_model_name="q", session_len=99
        )
        assert result.argv[:2] == ["swift", "deploy"]
        args = result.argv[2:]
        for word in args:
            if word.startswith("--"):
                assert word[2:] in fields, f"{word} is not a DeployArguments field"
        namespace, unknown = parser.parse_known_args(args)
        assert unknown == []
        pairs = dict(zip(args[::2], args[1::2], strict=True))
        for name, text in pairs.items():
            parsed = getattr(namespace, name[2:])
            if isinstance(parsed, bool):  # before int: bool is an int subclass
                assert parsed == (text.lower() == "true")
            elif isinstance(parsed, float):
                assert parsed == float(text)
            elif isinstance(parsed, int):
                assert parsed == int(text)
            else:
                assert parsed == text
        assert namespace.model_type in MODEL_MAPPING
        assert namespace.template in TEMPLATE_MAPPING


def test_the_servers_said_to_force_lengths_are_the_ones_with_fields() -> None:
    """The space refuses equal work on a server that cannot force a length
    (space.support.LENGTH_FORCING_SERVERS); each one it allows renders its fields here."""
    from autotune.export import forced_length
    from autotune.space.support import LENGTH_FORCING_SERVERS

    for fmt in ("swift", "lmdeploy", "vllm"):
        fields = forced_length(fmt, 64)
        assert (fields is not None) == (fmt in LENGTH_FORCING_SERVERS), fmt
        if fields is not None:
            assert fields["ignore_eos"] is True and 64 in fields.values()
