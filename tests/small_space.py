"""Small, fast space files for tests that run real studies: a few items, few requests."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import yaml

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "models" / "tiny-qwen3-vl"
SMOKE_SET = REPO / "evalsets" / "smoke"


# The load of a test that checks the loop, not the figures: a few requests, 2 s at most.
LOOP_WORKLOAD = {"warmup_requests": 1, "requests": 2, "max_measure_s": 1.5, "max_warmup_s": 0.5}
# The longer load (4 s at most) of a test whose figures are compared (verify, premises).
FIGURES_WORKLOAD = {"warmup_requests": 1, "requests": 2, "max_measure_s": 3, "max_warmup_s": 1}


def small_evalset(tmp_path: Path, n_text: int = 6, n_shapes: int = 2) -> Path:
    """The first items of each category of the smoke set, copied with their images."""
    target = tmp_path / "evalset"
    (target / "images").mkdir(parents=True, exist_ok=True)
    lines = (SMOKE_SET / "items.jsonl").read_text(encoding="utf-8").splitlines()
    quota = {"text_line": n_text, "shapes": n_shapes}
    kept = []
    for line in lines:
        item = json.loads(line)
        if quota.get(item["category"], 0) > 0:
            quota[item["category"]] -= 1
            shutil.copy(SMOKE_SET / item["image"], target / item["image"])
            kept.append(line)
    (target / "items.jsonl").write_text("\n".join(kept) + "\n", encoding="utf-8")
    return target


def small_space(tmp_path: Path, **overrides: Any) -> Path:
    """A copy of the smoke space pointing at absolute paths, with fewer requests."""
    data = yaml.safe_load((REPO / "search_spaces" / "smoke.yaml").read_text(encoding="utf-8"))
    data["model"] = str(MODEL)
    data["evalset"] = str(small_evalset(tmp_path))
    # Load tests stop after 2 s at most: these tests are about the loop, its records and its
    # commands, not the figures. A test that compares figures passes FIGURES_WORKLOAD.
    data["workload"] = dict(LOOP_WORKLOAD)
    data["screening"] = {"items": 0}
    # The smoke space's named candidates would take trials these tests count for their own
    # parameters; a test that wants candidates passes them.
    data.pop("candidates", None)
    # The loop measured in-process (no server start-up per study): the smoke space itself
    # measures through `swift deploy`, which tests/end_to_end/test_first_run.py runs as a user does.
    data["reference"] = {**data["reference"], "backend": "transformers", "compile_mode": "none"}
    data.update(overrides)
    # A few items pass only answers identical to the reference's, and a study refuses such a
    # set unless its space says that is what it wants; a test of the refusal says false.
    constraints = data.setdefault("constraints", {})
    constraints.setdefault("accuracy", {}).setdefault("identical_answers_only", True)
    path = tmp_path / f"{data.get('name', 'small')}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def quick_space(
    name: str,
    folder: Path,
    *,
    evalset: Path | None = None,
    screening_items: int | None = None,
    **workload: float,
) -> Path:
    """Built-in space `name` as `folder`/<name>.yaml: the same study (name, evalset, params,
    trials, reference) with the model on an absolute path and shorter workload caps.

    The built-in caps are sized for a useful figure; tests that check the loop, its records and
    its commands get the same kinds of figures from a shorter load (the caps bound time, not
    what is recorded). `evalset`: another set (small_evalset's, say) for tests that do not
    check the built-in one's accuracy. `screening_items`: 0 turns screening off, for tests
    that do not check it (tests/accuracy/test_reuse_and_screening.py does).
    """
    data = yaml.safe_load((REPO / "search_spaces" / f"{name}.yaml").read_text(encoding="utf-8"))
    data["model"] = str(MODEL)
    data["workload"] = {**data["workload"], **workload}
    if evalset is not None:
        data["evalset"] = str(evalset)
    if screening_items is not None:
        data["screening"] = {**data.get("screening", {}), "items": screening_items}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def autotune_cli(
    *args: str, cwd: Path, timeout: float = 900, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The real command line in a child process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "autotune.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def run_study(
    space: Path, *, study: str, cwd: Path, extra: tuple[str, ...] = ()
) -> tuple[subprocess.CompletedProcess[str], optuna.Study]:
    """`autotune run` on `space` into cwd/<study>.db; the process result and the study."""
    db = cwd / f"{study}.db"
    result = autotune_cli(
        "run",
        "--space",
        str(space),
        "--study",
        study,
        "--storage",
        f"sqlite:///{db}",
        *extra,
        cwd=cwd,
    )
    loaded = optuna.load_study(study_name=study, storage=f"sqlite:///{db}") if db.exists() else None
    return result, loaded  # type: ignore[return-value]
