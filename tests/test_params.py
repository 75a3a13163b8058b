"""The lever table (autotune.params.LEVER_TABLE): every list of parameters derives from it, and a
new lever is one declaration plus one flag per engine that has it (issue 55)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autotune.params import (
    BACKEND_PARAMS,
    LAUNCH_PARAMS,
    LEVERS,
    OUTPUT_NEUTRAL_PARAMS,
    PARAM_NAMES,
    REQUEST_LEVERS,
    REQUEST_PARAMS,
    SAMPLING_PARAMS,
    TrialConfig,
)
from autotune.space.support import PLAIN

REPO = Path(__file__).resolve().parents[1]


def test_the_table_gives_the_lists_every_stored_trial_was_written_with() -> None:
    """The lists as they were written by hand before the table: a stored configuration's keys
    and order, the launch key, the output key and each engine's parameters read the same."""
    launch = (
        "backend",
        "dtype",
        "weight_quant",
        "kv_quant",
        "attn_implementation",
        "compile_mode",
        "kv_cache_fraction",
        "max_batch_size",
        "tensor_parallel",
        "prefix_cache",
    )
    request = (
        "image_max_side",
        "batch_size",
        "do_sample",
        "temperature",
        "top_k",
        "top_p",
        "repetition_penalty",
        "max_new_tokens",
    )
    lacked = {name: set(PARAM_NAMES) - params for name, params in BACKEND_PARAMS.items()}
    derived = {
        "launch": LAUNCH_PARAMS,
        "names": PARAM_NAMES,
        "request": REQUEST_PARAMS,
        "fields": list(TrialConfig.model_fields),
        "neutral": OUTPUT_NEUTRAL_PARAMS,
        "sampling": SAMPLING_PARAMS,
        "request_levers": REQUEST_LEVERS,
        "levers": set(LEVERS),
        "checked": PLAIN,
        **{
            f"lacked by {name}": lacked[name]
            for name in ("transformers", "swift", "lmdeploy", "vllm")
        },
    }
    expected = {
        "launch": launch,
        "names": launch + request,
        "request": set(request),
        "fields": [
            *launch[:6],
            "image_max_side",
            *launch[6:],
            *request[1:],
            "seed",
            "engine_defaults",
        ],
        "neutral": {"batch_size", "kv_cache_fraction", "max_batch_size"},
        "sampling": {"temperature", "top_k", "top_p"},
        "request_levers": ("image_max_side", "batch_size"),
        "levers": {"image_max_side", "batch_size", "kv_cache_fraction", "compile_mode"},
        "checked": {"weight_quant": "none", "kv_quant": "none", "prefix_cache": False},
        "lacked by transformers": {"kv_cache_fraction", "max_batch_size", "tensor_parallel"},
        "lacked by swift": {
            "kv_cache_fraction",
            "compile_mode",
            "tensor_parallel",
            "weight_quant",
            "kv_quant",
            "prefix_cache",
        },
        "lacked by lmdeploy": {"attn_implementation"},
        "lacked by vllm": {"attn_implementation"},
    }
    assert derived == expected
    config = TrialConfig(backend="vllm", batch_size=8, kv_cache_fraction=0.5, prefix_cache=True)
    assert set(config.output_key()) == set(PARAM_NAMES) - OUTPUT_NEUTRAL_PARAMS | {"seed"}


# The new lever: a switch LMDeploy has (one flag), the in-process engine has as a what-if, and
# swift deploy and vLLM lack. Inserted as the table's last entry.
DECLARATION = """\
    Lever(
        "turbo_switch",
        LAUNCH,
        StrictBool,
        False,
        "A test lever: the engine's turbo switch.",
        lacked_by={"swift": "swift deploy has no turbo switch", "vllm": "vLLM has none"},
        what_if="turbo switched on in-process",
    ),
"""
FLAG = '    turbo_switch = Flag("turbo-switch", lever="turbo_switch")\n'

# Run on the edited copy of the package: what each layer makes of the new lever.
PROBE = """
import json, sys
import optuna
import yaml
import autotune
from autotune.engine_args import EngineArgs
from autotune.export import render_export
from autotune.export.reproduce import reproduction
from autotune.params import BACKEND_PARAMS, LAUNCH_PARAMS, PARAM_NAMES, TrialConfig
from autotune.records.stored import TrialRecord
from autotune.space import load_space
from autotune.space.sampling import suggest
import autotune.study.proposals.steering as steps

facts = {"package": autotune.__file__, "launch": "turbo_switch" in LAUNCH_PARAMS,
         "names": "turbo_switch" in PARAM_NAMES,
         "engines": sorted(n for n, params in BACKEND_PARAMS.items() if "turbo_switch" in params)}
on = TrialConfig(backend="lmdeploy", turbo_switch=True)
facts["output_key"] = on.output_key().get("turbo_switch")
facts["launch_key"] = on.launch_key() != TrialConfig(backend="lmdeploy").launch_key()

space_file = sys.argv[1]
with open(space_file, "w") as f:
    yaml.safe_dump({"model": "some/model", "device": "cuda",
                    "reference": {"backend": "lmdeploy", "dtype": "bfloat16"},
                    "params": {"turbo_switch": {"choices": [False, True]}}}, f)
space = load_space(space_file)
study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
proposed = suggest(space, study.ask())
facts["searched"] = sorted(study.trials[0].params)

base = optuna.trial.create_trial(state=optuna.trial.TrialState.COMPLETE, value=1.0,
                                 user_attrs={"config": TrialConfig(backend="lmdeploy",
                                                                   dtype="bfloat16").model_dump()})
stepped = optuna.create_study()
stepped.add_trial(base)
steps._incumbent = lambda study: study.get_trials()[0]
step = steps.next_step(space, stepped, launch_steps_left=True)
facts["step"] = [step.lever, step.value, step.new_launch]

facts["lmdeploy_on"] = render_export(on, fmt="lmdeploy", model="m").argv
off = TrialConfig(backend="lmdeploy")
facts["lmdeploy_off"] = render_export(off, fmt="lmdeploy", model="m").argv
try:
    EngineArgs(lmdeploy={"turbo-switch": True})
except ValueError as exc:
    facts["reserved"] = str(exc)

in_process = TrialConfig(turbo_switch=True)
record = TrialRecord.from_attrs({"config": in_process.model_dump(),
                                 "environment": {"runner": "inprocess"}}, number=0)
check = reproduction(record, "swift")
facts["reproduces"] = [check.deployable, check.reason]
facts["swift_blockers"] = render_export(in_process, fmt="swift", model="m").blockers
print(json.dumps(facts))
"""


def _insert(path: Path, text: str, *, before: str, after: str) -> None:
    """`text` inserted before the first `before` that follows `after` in the file at `path`."""
    source = path.read_text(encoding="utf-8")
    at = source.index(before, source.index(after))
    path.write_text(source[:at] + text + source[at:], encoding="utf-8")


@pytest.mark.slow  # a child interpreter imports the edited package
def test_a_new_lever_is_one_declaration_and_one_flag(tmp_path: Path) -> None:
    """A copy of the package gets the lever's declaration (the table's last entry) and
    LMDeploy's flag for it, and nothing else: TrialConfig's field is made from the table
    (pydantic.create_model), so there is no extra line. The lever is then searched, stepped
    to, exported with its flag, reserved from engine_args and judged by the reproduction
    check."""
    shutil.copytree(
        REPO / "autotune", tmp_path / "autotune", ignore=shutil.ignore_patterns("__pycache__")
    )
    _insert(tmp_path / "autotune/params.py", DECLARATION, before="\n)\n", after="\nLEVER_TABLE")
    _insert(tmp_path / "autotune/backends/lmdeploy.py", FLAG, before="\n\nFLAGS = ", after="")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PROBE), str(tmp_path / "space.yaml")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.splitlines()[-1])
    assert Path(facts["package"]).is_relative_to(tmp_path)  # the edited copy ran
    assert facts["launch"] and facts["names"] and facts["launch_key"]
    assert facts["engines"] == ["lmdeploy", "transformers"]
    assert facts["output_key"] is True  # it may change the answers: not output-neutral
    assert facts["searched"] == ["turbo_switch"]
    assert facts["step"] == ["turbo_switch", True, True]
    assert "--turbo-switch" in facts["lmdeploy_on"]
    assert "--turbo-switch" not in facts["lmdeploy_off"]
    assert "the turbo_switch parameter" in facts["reserved"]
    deployable, reason = facts["reproduces"]
    assert not deployable
    assert reason == "turbo switched on in-process: swift deploy has no turbo switch"
    assert any(reason in blocker for blocker in facts["swift_blockers"])
