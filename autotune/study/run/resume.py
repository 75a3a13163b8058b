"""A resume checks what its comparisons rest on, before it writes anything.

Every trial of a study is judged against its reference, on its evaluation set, under its
accuracy floor, and the sampler learns from the distributions it drew from. A run that resumes
a study with another set, reference, floor or parameter space would mix trials that cannot be
compared (a trial judged "accuracy 0.025 vs reference 1.025" against the old items). What they
were is stored when the study is created (`COMPARISON_BASIS`), and a resume that differs is
refused in one line naming what changed. A study stored before this record existed resumes as
it did, and records it then.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import optuna

from autotune.errors import StudyError
from autotune.evalset.dataset import EvalSet
from autotune.params import base_param
from autotune.records.stored import StudyRecord
from autotune.space.sampling import distribution
from autotune.study.plan import StudyPlan

# The study attribute that holds comparison_basis(plan).
COMPARISON_BASIS = "comparison_basis"
# How long a run that found a study another run has just created waits for that run to store
# what the study is (a few writes, milliseconds), before taking it for a study whose creator
# died half-way.
SETUP_WAIT_S = 30.0
_POLL_S = 0.2
# What each part of the basis is called in the line that refuses a resume.
_WHAT = {
    "evalset": ("another evaluation set", "evaluation set"),
    "reference": ("another reference", "reference"),
    "floor": ("another accuracy floor", "accuracy floor"),
    "params": ("other searched parameters", "parameters"),
}
_SHOWN_CHANGES = 3


@functools.cache
def _file_digest(path: Path, mtime_ns: int, size: int) -> bytes:
    """A file's SHA-256, read once per process while it stays as it was (a pool of
    thousands of images is hashed by every open of the study: the coordinator's, each
    worker's)."""
    return hashlib.sha256(path.read_bytes()).digest()


def _digest(named: dict[str, Path]) -> str:
    """One hash of the files, each under its name (a path relative to the set: the same set
    copied elsewhere is the same set)."""
    hashed = hashlib.sha256()
    for name, path in named.items():
        stat = path.stat()
        hashed.update(name.encode() + b"\0" + _file_digest(path, stat.st_mtime_ns, stat.st_size))
    return hashed.hexdigest()[:16]


def evalset_basis(evalset: EvalSet) -> dict[str, str]:
    """The set's name and a hash of its items file and of its images (in item order)."""
    return {
        "name": evalset.name,
        "items": _digest({"items": evalset.path}),
        "images": _digest({item.image: item.image_path for item in evalset.items}),
    }


def comparison_basis(plan: StudyPlan) -> dict[str, Any]:
    """What every comparison in the study rests on. Models are dumped whole, without their
    defaults: a field added later (a new floor setting) is compared as soon as it is set,
    and a study stored before it existed still resumes while it keeps its default."""
    space = plan.space
    return {
        "evalset": evalset_basis(plan.evalset),
        "reference": space.reference_config().model_dump(mode="json", exclude_defaults=True),
        "floor": space.constraints.accuracy.model_dump(mode="json", exclude_defaults=True),
        "params": {
            name: spec.model_dump(mode="json", exclude_defaults=True)
            for name, spec in space.params.items()
        },
    }


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= 40 else text[:39] + "…"


def _changes(before: Any, now: Any) -> str:
    """'max_drop (default) -> 0.1, test "point" -> (default)': the keys that differ, the
    first few."""
    if not isinstance(before, dict) or not isinstance(now, dict):
        return f"{_short(before)} -> {_short(now)}"
    changed = []
    for key in sorted(set(before) | set(now), key=str):
        if key not in now:
            changed.append(f"{key} {_short(before[key])} -> (default)")
        elif key not in before:
            changed.append(f"{key} (default) -> {_short(now[key])}")
        elif before[key] != now[key]:
            changed.append(f"{key} {_short(before[key])} -> {_short(now[key])}")
    more = len(changed) - _SHOWN_CHANGES
    return ", ".join(changed[:_SHOWN_CHANGES]) + (f" and {more} more" if more > 0 else "")


def _evalset_changes(before: Any, now: dict[str, str]) -> str:
    if not isinstance(before, dict) or before.get("name") != now["name"]:
        name = before.get("name") if isinstance(before, dict) else before
        return f"{name} -> {now['name']}"
    parts = [part for part in ("items", "images") if before.get(part) != now[part]]
    return f"{now['name']}: its {' and '.join(parts)} changed since the study was made"


def check_basis(study: optuna.Study, plan: StudyPlan, basis: dict[str, Any]) -> None:
    """StudyError naming what differs from the stored basis; nothing when none is stored."""
    stored = study.user_attrs.get(COMPARISON_BASIS)
    if stored is None:
        return
    stored = stored if isinstance(stored, dict) else {}
    for part, now in basis.items():
        before = stored.get(part)
        if before == now:
            continue
        change = _evalset_changes(before, now) if part == "evalset" else _changes(before, now)
        other, noun = _WHAT[part]
        raise StudyError(
            f"study '{plan.study_name}' was made with {other} ({change}); resume it with the "
            f"{noun} it was made with, or start a new study with --study NEW_NAME"
        )


def await_setup(study: optuna.Study) -> None:
    """Wait while another run that has just created the study stores what it is (it writes
    the basis first): a run that read the half-made study would take it for its own."""
    if study.get_trials(deepcopy=False):
        return  # set up long ago (by Optuna alone, say): nobody is writing it now
    deadline = time.monotonic() + SETUP_WAIT_S
    while time.monotonic() < deadline:
        attrs = study.user_attrs
        if COMPARISON_BASIS in attrs or "objective_metrics" in attrs:
            return
        time.sleep(_POLL_S)


def check_resumable(study: optuna.Study, plan: StudyPlan, basis: dict[str, Any]) -> None:
    """StudyError, in one line, when this run cannot resume `study` as it is."""
    record = StudyRecord.of(study)  # a study from a newer autotune stops here, in one line
    if "objective_metrics" not in record.model_fields_set:
        check_basis(study, plan, basis)  # another run made it a moment ago
        return
    stored = record.objective_metrics
    wanted = [o.metric for o in plan.space.objectives]
    if stored != wanted:
        raise StudyError(
            f"study '{plan.study_name}' optimises {stored}, not {wanted}; "
            "use another --study name for a different space"
        )
    if record.endpoint != plan.endpoint:
        where = record.endpoint or "servers autotune starts itself"
        raise StudyError(
            f"study '{plan.study_name}' measured {where}; resume it the same way, or use "
            "another --study name"
        )
    _check_same_distributions(study, plan)
    if record.dummy_weights != plan.dummy_weights:
        how = "with" if record.dummy_weights else "without"
        raise StudyError(
            f"study '{plan.study_name}' was run {how} --dummy-weights; resume it the same way, "
            "or use another --study name"
        )
    check_basis(study, plan, basis)


def _check_same_distributions(study: optuna.Study, plan: StudyPlan) -> None:
    """Optuna refuses a parameter searched over other values than the study's; say it before
    a trial fails on it (an engine not installed here, fewer GPUs for tensor_parallel)."""
    stored: dict[str, optuna.distributions.BaseDistribution] = {}
    for trial in study.get_trials(deepcopy=False):
        stored.update(trial.distributions)
    for name, before in stored.items():
        if base_param(name) not in plan.space.params:
            continue
        now = distribution(plan.space, name)
        try:
            optuna.distributions.check_distribution_compatibility(before, now)
        except ValueError:
            raise StudyError(
                f"study '{plan.study_name}' searched {name} over {_values(before)}, this run "
                f"can only search {_values(now)} (a choice whose engine is not installed, or that "
                "needs more GPUs than --gpus gives, is dropped); resume it where the same "
                "values can run, or use another --study name"
            ) from None


def _values(distribution: optuna.distributions.BaseDistribution) -> str:
    if isinstance(distribution, optuna.distributions.CategoricalDistribution):
        return "[" + ", ".join(str(choice) for choice in distribution.choices) + "]"
    low, high = getattr(distribution, "low", "?"), getattr(distribution, "high", "?")
    return f"{low}..{high}"
