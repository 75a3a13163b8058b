"""The deploy target's defaults as a study's baseline (autotune.space.engine_defaults): the
configuration it is measured as, and the commands it renders, which carry no flag of
autotune's (TrialConfig.engine_defaults)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from small_space import small_space

from autotune.export import render_export
from autotune.params import TrialConfig
from autotune.space import load_space
from autotune.space.engine_defaults import baseline_config, defaults_label
from autotune.space.narrowing import for_endpoint


def test_the_smoke_space_measures_swift_deploy_s_defaults() -> None:
    space = load_space("smoke")
    config = baseline_config(space)
    assert config is not None and config.engine_defaults
    # The space's largest concurrency, full-size images, greedy answers of the reference's
    # length; no launch value of autotune's.
    assert (config.backend, config.batch_size, config.image_max_side) == ("swift", 8, None)
    assert (config.do_sample, config.max_new_tokens) == (False, 16)
    assert (config.dtype, config.max_batch_size, config.kv_cache_fraction) == ("auto", None, None)
    assert defaults_label(space.deploy) == "swift deploy's defaults"


def test_swift_deploy_s_defaults_render_no_flag_and_no_pinned_image_bounds() -> None:
    config = baseline_config(load_space("smoke"))
    assert config is not None
    export = render_export(config, fmt="swift", model="M", port=8000)
    assert export.argv == [
        "swift", "deploy", "--model", "M", "--model_type", "qwen3_vl", "--template", "qwen3_vl",
        "--host", "0.0.0.0", "--port", "8000",
    ]  # fmt: skip
    assert export.env == {} and export.exact
    assert "as its documentation starts it" in export.text


def test_lmdeploy_s_defaults_are_its_documented_start_command() -> None:
    space = load_space("default")
    config = baseline_config(space)
    assert config is not None
    # LMDeploy captures CUDA graphs unless told otherwise: the record says so.
    assert (config.backend, config.compile_mode, config.batch_size) == ("lmdeploy", "default", 64)
    export = render_export(config, fmt="lmdeploy", model="M")
    assert export.argv == [
        "lmdeploy", "serve", "api_server", "M", "--backend", "pytorch",
        "--server-name", "0.0.0.0",
    ]  # fmt: skip
    assert defaults_label("lmdeploy") == "LMDeploy's defaults"


def test_vllm_s_defaults_are_vllm_serve_alone() -> None:
    config = TrialConfig(
        backend="vllm", engine_defaults=True, compile_mode="default", prefix_cache=True
    )
    export = render_export(config, fmt="vllm", model="M")
    assert export.argv == ["vllm", "serve", "M", "--host", "0.0.0.0"]
    # The same values without engine_defaults are autotune's own launch, every flag spelled.
    tuned = render_export(
        config.model_copy(update={"engine_defaults": False}), fmt="vllm", model="M"
    )
    assert "--max-num-seqs" in tuned.argv and "--limit-mm-per-prompt" in tuned.argv


def test_a_space_that_never_measures_its_deploy_engine_has_no_baseline(tmp_path: Path) -> None:
    # The reference in-process, no backend searched: nothing here starts `swift deploy`.
    assert baseline_config(load_space(str(small_space(tmp_path)))) is None


def test_engine_defaults_is_its_own_launch_and_its_own_answers() -> None:
    base = TrialConfig(backend="swift", batch_size=8)
    defaults = base.model_copy(update={"engine_defaults": True})
    assert defaults.launch_key() != base.launch_key()
    assert defaults.output_key() != base.output_key()
    # Off, it is not stored: every configuration recorded before it existed reads the same.
    assert "engine_defaults" not in base.model_dump()
    assert TrialConfig(**defaults.model_dump()) == defaults
    with pytest.raises(ValidationError, match="engine_defaults leaves max_batch_size"):
        TrialConfig(backend="swift", engine_defaults=True, max_batch_size=8)
    with pytest.raises(ValidationError, match="engine_defaults starts a server"):
        TrialConfig(backend="transformers", engine_defaults=True)


def test_a_space_may_leave_the_baseline_out() -> None:
    # smoke-swift shows one launch serving every trial: a second launch is not its subject.
    assert baseline_config(load_space("smoke-swift")) is None


def test_an_endpoint_study_has_no_baseline() -> None:
    # The server is someone else's: a trial there would carry the label of a launch never made.
    assert baseline_config(for_endpoint(load_space("smoke"))) is None
