"""What every engine in the registry (autotune.backends) must offer, checked engine by engine.

One parametrised suite: an engine that is added with gaps (a deploy target with no renderer,
a length-forcing server with no fields, a parameter name that does not exist) fails here by
name.
"""

from __future__ import annotations

import re
from typing import get_args

import pytest
from pydantic import ValidationError

from autotune.backends import BACKENDS, deploy_targets, server_backends
from autotune.checkpoints.adapters import CANNOT_SERVE
from autotune.engine_args import EngineArgs, flag_name
from autotune.engines.identity import check_engine
from autotune.export import FORMATS, forced_length, render_export, renderer
from autotune.export.reproduce import COMMANDS
from autotune.params import BACKEND_PARAMS, PARAM_NAMES, Backend, TrialConfig, lacks
from autotune.space.availability import missing_reason
from autotune.space.support import supported_choices, unsupported_reason
from autotune.study.run.budget import STARTUP_GUESS_S

ENGINES = sorted(BACKENDS)
SERVERS = sorted(server_backends())


def test_the_registry_names_the_engines_a_trial_config_accepts() -> None:
    assert set(BACKENDS) == set(get_args(Backend))
    assert all(name == backend.name for name, backend in BACKENDS.items())
    assert BACKENDS["transformers"].server is False  # the reference engine runs in-process


@pytest.mark.parametrize("name", ENGINES)
def test_every_engine_lacks_only_real_parameters_and_keeps_the_core(name: str) -> None:
    backend = BACKENDS[name]
    lacked = lacks(name)  # the lever table's, and the engine's own
    assert lacked <= set(PARAM_NAMES), lacked - set(PARAM_NAMES)
    assert backend.lacks <= lacked
    # What every engine must take: which engine, and the request-time load and decoding.
    core = {"backend", "dtype", "image_max_side", "batch_size", "do_sample", "max_new_tokens"}
    assert core <= BACKEND_PARAMS[name]
    assert BACKEND_PARAMS[name] == set(PARAM_NAMES) - lacked
    assert STARTUP_GUESS_S[name] == backend.startup_guess_s > 0


@pytest.mark.parametrize("name", SERVERS)
def test_every_server_engine_is_a_deploy_target_with_a_renderer_and_an_install_line(
    name: str,
) -> None:
    backend = BACKENDS[name]
    assert name in deploy_targets() and name in FORMATS
    assert name in backend.deploys
    assert backend.package and backend.module and backend.program
    assert backend.install_hint and backend.install_hint.startswith("pip install")
    config = TrialConfig(backend=name, dtype="bfloat16", batch_size=4, max_new_tokens=64)
    export = render_export(config, fmt=name, model="/models/m", port=8000)
    # The command the export prints is the one reproduce and the report name for it.
    assert " ".join(export.argv).startswith(backend.deploy_command or "?")
    assert COMMANDS[name] == backend.deploy_command


@pytest.mark.parametrize("name", SERVERS)
def test_every_server_names_a_renderer_and_spells_flags_and_engines_its_own_way(name: str) -> None:
    backend = BACKENDS[name]
    assert callable(renderer(name)), backend.renderer
    sep = backend.flag_separator
    assert flag_name(name, "--max_batch-size") == f"max{sep}batch{sep}size"
    # The command autotune renders asks for the engine the trial records, and a clean log
    # says it ran that engine.
    config = TrialConfig(backend=name, dtype="bfloat16", batch_size=1, max_new_tokens=16)
    check = check_engine(name, render_export(config, fmt=name, model="m").argv, log_text="")
    assert not check.fell_back
    inner = backend.inner_engine
    if inner is not None and inner.fallback_log:
        fell = check_engine(name, [], log_text="... Fallback to pytorch engine because ...")
        assert (fell.requested, fell.actual) == (inner.default, inner.fallback_to)


@pytest.mark.parametrize("name", SERVERS)
def test_a_server_forces_answer_lengths_exactly_when_the_registry_says_so(name: str) -> None:
    fields = forced_length(name, 128)
    assert (fields is not None) == BACKENDS[name].forces_length
    if fields is not None:
        assert 128 in fields.values() and fields.get("ignore_eos") is True


@pytest.mark.parametrize("name", SERVERS)
def test_a_missing_engine_is_named_with_its_install_line(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = BACKENDS[name]
    monkeypatch.setattr("autotune.space.availability._has_module", lambda module: False)
    reason = missing_reason("backend", name)
    assert reason == f"backend {name} is not installed ({backend.install_hint})"


def test_the_in_process_engine_needs_no_install_and_no_server() -> None:
    assert missing_reason("backend", "transformers") is None
    assert "transformers" not in deploy_targets()
    assert any("transformers" in BACKENDS[t].deploys for t in deploy_targets())


@pytest.mark.parametrize("name", SERVERS)
def test_every_server_engine_reserves_its_own_flags_and_names_its_context_flag(name: str) -> None:
    """A space's engine_args cannot set what autotune renders itself, on every engine: a
    reserved flag given again is refused with what sets it."""
    backend = BACKENDS[name]
    assert backend.reserved_flags and backend.session_len_flag
    assert backend.session_len_flag not in backend.reserved_flags  # engine_args may set it
    flag = next(iter(backend.reserved_flags))
    with pytest.raises(ValidationError, match=re.escape(backend.reserved_flags[flag])):
        EngineArgs.model_validate({name: {flag: "1"}})


@pytest.mark.parametrize("name", ENGINES)
def test_an_engine_judges_only_values_of_parameters_it_has(name: str) -> None:
    backend = BACKENDS[name]
    for table in (backend.unsupported, backend.cuda_only):
        for param, reasons in table.items():
            assert param in BACKEND_PARAMS[name], f"{name} lacks {param} altogether"
            for value, reason in reasons.items():
                device = "cpu" if table is backend.cuda_only else "cuda"
                assert unsupported_reason(name, param, value, device=device) == reason
                assert value not in supported_choices(name, param, [value], device=device)


@pytest.mark.parametrize("name", ENGINES)
def test_an_engine_that_cannot_serve_adapters_says_why(name: str) -> None:
    assert CANNOT_SERVE.get(name) == BACKENDS[name].adapters_refused
