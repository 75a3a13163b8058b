"""Opening a study: create or resume it, repair what an earlier run left behind, queue the
reference and the named candidates. What runs before the first trial, apart from the loop that
runs trials (autotune.study.run.loop).

A resume checks what its comparisons rest on, before it writes anything. Every trial of a study
is judged against its reference, on its evaluation set, under its accuracy floor, and the
sampler learns from the distributions it drew from. A run that resumes a study with another set,
reference, floor or parameter space would mix trials that cannot be compared. What they were is
stored when the study is created (`COMPARISON_BASIS`), and a resume that differs is refused in
one line naming what changed (a study stored before this record existed records it then).

Its figures rest on the machine too: each trial records the one that measured it
(autotune.records.machine), and a resume on another GPU kind, host CPU or engine version is
refused by name, the same way, unless --allow-other-machine makes its trials a comparison
group of their own (autotune.study.results.groups), ranked and raced among themselves and
shown against a reference measured again on that machine (queued first, as in a new study).

Then an earlier run's processes, RUNNING trials and spooled results are dealt with
(autotune.study.store.recovery), and the reference and candidates are queued once
(autotune.study.proposals.queueing).
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.accuracy.answers_cache import evalset_digest
from autotune.accuracy.confirm import HOLDOUT, study_holdout
from autotune.accuracy.floor import floor_warning, set_too_small
from autotune.engines.leftovers import clean_up
from autotune.errors import SpaceError, StudyError
from autotune.evalset.dataset import EvalSet
from autotune.params import base_param
from autotune.records.machine import Machine
from autotune.records.readable import unreadable_line, unreadable_trials
from autotune.records.stored import StudyRecord, TrialRecord
from autotune.records.writer import write_study
from autotune.space import SearchSpace
from autotune.space.sampling import distribution
from autotune.study.plan import StudyPlan, study_attrs
from autotune.study.proposals.queueing import candidates_now, queue_reference_and_candidates
from autotune.study.proposals.sampler import make_sampler
from autotune.study.results.counting import counted_trials
from autotune.study.results.groups import Group, matching_group, study_groups
from autotune.study.results.progress import Progress
from autotune.study.results.select import reference_trial
from autotune.study.store.recovery import Spool, fail_orphaned, fail_stale, recover
from autotune.study.store.storage import local_file, open_storage, remove_study_file

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


def comparison_basis(plan: StudyPlan) -> dict[str, Any]:
    """What every comparison in the study rests on. Models are dumped whole, without their
    defaults: a field added later (a new floor setting) is compared as soon as it is set,
    and a study stored before it existed still resumes while it keeps its default."""
    space = plan.space
    return {
        "evalset": evalset_digest(plan.evalset),
        "reference": space.reference_config().model_dump(mode="json", exclude_defaults=True),
        # The held-out slice is pinned apart (keep_holdout), which may switch a
        # resumed study's confirmation off: the basis leaves it out.
        "floor": space.constraints.accuracy.model_dump(
            mode="json", exclude_defaults=True, exclude={"confirmation"}
        ),
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
    join_machine_group(study, plan)


def join_machine_group(study: optuna.Study, plan: StudyPlan) -> None:
    """Put this run's trials in the comparison group of its machine: the study's group it
    matches, or, with --allow-other-machine, a new one; StudyError naming what differs when
    the machine matches none and the flag is not given."""
    groups, machine = study_groups(study), plan.machine
    if not groups:
        return  # a new study, or one whose trials recorded nothing of their machine
    found = matching_group(groups, machine)
    if found is not None:
        plan.machine = machine.joined(found.id)
        return
    differ = sorted({name for group in groups for name in group.machine.unlike(machine)})
    versions = [name for name in differ if name in machine.versions]
    if not plan.allow_other_machine:
        before = " and on ".join(g.machine.words(versions) for g in groups[-2:])
        raise StudyError(
            f"study '{plan.study_name}' was measured on {before}, this machine has "
            f"{machine.words(versions)}: its figures cannot be ranked together; pass "
            "--allow-other-machine to add a new comparison group, or use another --study"
        )
    plan.machine = machine.joined(_new_group_id(groups, machine))
    note = (
        f"study '{plan.study_name}': this machine ({machine.words(versions)}) is a new "
        f"comparison group: its reference is measured again here, and its trials are ranked "
        "and raced among themselves"
    )
    if note not in plan.notes:
        plan.notes.append(note)


def _new_group_id(groups: list[Group], machine: Machine) -> str:
    """The machine's own group id, unless a group of the study holds it already (a record
    whose machine was edited, not its group): then a numbered one."""
    taken = {group.id for group in groups}
    group = machine.group or "machine"
    number = 2
    while group in taken:
        group, number = f"{machine.group}-{number}", number + 1
    return group


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


def open_study(plan: StudyPlan) -> tuple[optuna.Study, optuna.samplers.BaseSampler]:
    """Create or resume the study. A study file this run creates is removed again when the
    study cannot be set up in it (a full disk), so a rerun starts clean and finds one study."""
    stored = local_file(plan.storage_url)
    new_file = stored is not None and not stored.exists()
    try:
        return _open_study(plan)
    except BaseException:
        if new_file and stored is not None:
            remove_study_file(stored)
        raise


def _open_study(plan: StudyPlan) -> tuple[optuna.Study, optuna.samplers.BaseSampler]:
    space = plan.space
    storage = open_storage(plan.storage_url, create=True)
    # Failed trials are reported by our progress lines; Optuna's own warning would add a
    # traceback for every contained failure.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    basis = comparison_basis(plan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = make_sampler(space)
        # Looked up first: creating a study that exists writes a refused record to a journal,
        # and a resume that is refused must write nothing.
        if _exists(storage, plan.study_name):
            study = optuna.load_study(study_name=plan.study_name, storage=storage, sampler=sampler)
            await_setup(study)
        else:
            study = _create(plan, storage, sampler, basis)
    check_resumable(study, plan, basis)
    if COMPARISON_BASIS not in study.user_attrs:  # stored before the basis was
        write_study(study, StudyRecord.part(comparison_basis=basis))
    if "objective_metrics" not in StudyRecord.of(study).model_fields_set:  # a new study
        write_study(study, study_attrs(plan))
        # Named objectives: optuna-dashboard labels its axes with them instead of "Objective 0".
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([o.metric for o in space.objectives])
    return study, sampler


def _exists(storage: optuna.storages.BaseStorage, name: str) -> bool:
    try:
        storage.get_study_id_from_name(name)
    except KeyError:
        return False
    return True


def _create(
    plan: StudyPlan,
    storage: optuna.storages.BaseStorage,
    sampler: optuna.samplers.BaseSampler,
    basis: dict[str, Any],
) -> optuna.Study:
    """The new study, its comparison basis stored first, so a run that opens it a moment later
    compares with it; or, when another run created it first, that run's study."""
    try:
        study = optuna.create_study(
            study_name=plan.study_name,
            storage=storage,
            directions=plan.space.directions(),
            sampler=sampler,
        )
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=plan.study_name, storage=storage, sampler=sampler)
        await_setup(study)
        return study
    write_study(study, StudyRecord.part(comparison_basis=basis))
    return study


def warn_if_set_too_small(study: optuna.Study, plan: StudyPlan, progress: Progress) -> None:
    """Once the reference's accuracy is known: say so when the set is too small for the floor."""
    reference = reference_trial(study, plan.group)
    accuracy = TrialRecord.of(reference).accuracy if reference is not None else None
    if accuracy is None:
        return
    warning = floor_warning(
        len(plan.evalset.items),
        accuracy,
        plan.space.constraints,
        evalset=plan.evalset.argument(),
    )
    if warning is not None:
        progress.note(f"warning: {warning}")
        if StudyRecord.of(study).floor_warning != warning:
            write_study(study, StudyRecord.part(floor_warning=warning))


def keep_holdout(study: optuna.Study, space: SearchSpace, evalset: EvalSet) -> None:
    """Hold out the items the study's first run held out (its size is written into `space`),
    and record them for a new study. A study begun before confirmations existed, with trials
    measured on the whole pool, goes on without one: its trials could never be confirmed."""
    confirmation = space.constraints.accuracy.confirmation
    recorded = study.user_attrs.get(HOLDOUT)
    if isinstance(recorded, dict):
        confirmation.items = int(recorded.get("items") or 0) or None
        confirmation.enabled = bool(recorded.get("items"))
        return
    if study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        confirmation.enabled = False
    write_study(study, StudyRecord.part(**{HOLDOUT: study_holdout(space, evalset).describe()}))


def prepare_study(
    plan: StudyPlan, target: int, progress: Progress, *, fits: Callable[[optuna.Study], bool]
) -> optuna.Study | None:
    """Open (or resume) the study, repair what an earlier run left behind, and queue the
    reference and the candidates. None when there is nothing to run (target or budget met).
    `fits`: whether the budget holds another trial (the run-time's rule, passed in by the
    loop that keeps it: autotune.study.run.budget.start_fits)."""
    small = (
        None
        if plan.dummy_weights
        else set_too_small(len(plan.evalset.items), plan.space.constraints)
    )
    if small is not None:  # before the study exists: nothing to leave behind
        raise SpaceError(f"{plan.space.name}: {small}")
    study, _ = open_study(plan)
    if not plan.dummy_weights:  # the items held out to confirm the recommendation
        keep_holdout(study, plan.space, plan.evalset)
    spool = Spool(plan.storage_url, plan.study_name)
    # What an earlier run left behind: its processes, its RUNNING trials, its unrecorded
    # results.
    repairs = [*clean_up(), *fail_orphaned(study), *fail_stale(study), *recover(study, spool)]
    repairs += [
        f"{unreadable_line(plan.study_name, t)}; it is left out (the sampler skips it)"
        for t in unreadable_trials(study)
    ]
    done = counted_trials(study)
    progress.start(done=done, study_name=plan.study_name)
    for note in [*plan.notes, *repairs]:
        progress.note(note)
    if done >= target:
        progress.note(f"study '{plan.study_name}' already has {done} counted trials")
        return None
    warn_if_set_too_small(study, plan, progress)
    if reference_trial(study, plan.group) is not None and not fits(study):
        return None
    first = candidates_now(plan)
    for note in queue_reference_and_candidates(study, plan, room=target - done, candidates=first):
        progress.note(note)
    return study
