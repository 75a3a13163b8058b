"""Comparison groups: the trials of a study measured on one kind of machine.

A study resumed on another machine with --allow-other-machine (autotune.study.start.opening)
holds figures that cannot be ranked together: an H200's tokens per second say nothing about a
configuration's rank on an H100. Each trial records its machine and group
(autotune.records.machine); `in_group` shows the study as one group sees it, so the front, the
recommendation, racing and the "x the reference" figure read only that group's trials, with
the code that reads a whole study. Each group measures its own reference
(autotune.study.results.select.reference_trial): a speed is shown against one of its
machine. A trial whose machine is unknown (it failed before it recorded one) is seen by every
group: it is never ranked, only counted.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.engines.gpus import visible_gpus
from autotune.engines.machine import this_machine
from autotune.errors import StudyError
from autotune.measure.registry import THROUGHPUT
from autotune.records.machine import Machine, trial_machine
from autotune.records.stored import StudyRecord, TrialRecord
from autotune.study.results.select import recommend
from autotune.study.store.optuna_private import storage_of
from autotune.study.store.snapshot import StorageView


def group_of(trial: FrozenTrial) -> str | None:
    """The trial's comparison group; None when its machine is unknown."""
    machine = trial_machine(trial.user_attrs)
    return machine.group if machine is not None else None


@dataclass
class Group:
    """One comparison group: its id, its machine (what its trials say of it), its trials."""

    id: str
    machine: Machine
    trials: list[int] = field(default_factory=list)

    def matches(self, machine: Machine) -> bool:
        """Whether `machine` is this group's: nothing both know of it differs (a record
        whose machine was edited keeps its group id, and is another machine all the same)."""
        return not self.machine.unlike(machine)


def study_groups(study: optuna.Study) -> list[Group]:
    """The study's comparison groups, in the order their first trials were made."""
    groups: dict[str, Group] = {}
    for trial in study.get_trials(deepcopy=False):
        machine = trial_machine(trial.user_attrs)
        if machine is None or machine.group is None:
            continue
        group = groups.setdefault(machine.group, Group(machine.group, machine))
        group.trials.append(trial.number)
        group.machine = _merged(group.machine, machine)
    return list(groups.values())


def _merged(known: Machine, more: Machine) -> Machine:
    """What two trials of one group say of its machine together (trials stored before
    machines were say what their environments held: one the GPUs, another torch)."""
    fields = known.written()
    for name, value in more.written().items():
        if name == "versions":
            fields["versions"] = {**value, **fields.get("versions", {})}
        else:
            fields.setdefault(name, value)
    return Machine.of(fields)


def matching_group(groups: list[Group], machine: Machine) -> Group | None:
    """The group `machine` belongs to: of the groups nothing it knows differs from, the one of
    its id, else the first (the group of trials stored before machines were); else None."""
    alike = [g for g in groups if g.matches(machine)]
    return next((g for g in alike if g.id == machine.group), alike[0] if alike else None)


class GroupStorage(StorageView):
    """A study's storage whose trials are group `group`'s and those whose machine is unknown."""

    def __init__(self, inner: optuna.storages.BaseStorage, group: str) -> None:
        super().__init__(inner)
        self.group = group

    def get_all_trials(
        self, study_id: int, deepcopy: bool = True, states: Container[TrialState] | None = None
    ) -> list[FrozenTrial]:
        trials = self.inner.get_all_trials(study_id, deepcopy=deepcopy, states=states)
        return [t for t in trials if group_of(t) in (self.group, None)]


class GroupView(optuna.Study):
    """The study as one comparison group sees it: its trials, and those whose machine is
    unknown (read through a GroupStorage). Everything else (attributes, directions) is the
    study's."""

    def __init__(self, study: optuna.Study, group: str) -> None:
        storage = GroupStorage(storage_of(study), group)
        super().__init__(study_name=study.study_name, storage=storage, sampler=study.sampler)
        self.group = group
        self.whole = study


def in_group(study: optuna.Study, group: str | None) -> optuna.Study:
    """`study` as group `group` sees it; the study itself when it holds no other group (every
    study measured on one machine)."""
    if group is None:
        return study
    whole = study.whole if isinstance(study, GroupView) else study
    others = {group_of(t) for t in whole.get_trials(deepcopy=False)} - {group, None}
    return GroupView(whole, group) if others else whole


def ranked_group(study: optuna.Study, machine: Machine) -> Group | None:
    """The group `best` ranks: this machine's, else the one measured last; None for a study
    without a trial that recorded its machine."""
    groups = study_groups(study)
    if not groups:
        return None
    return matching_group(groups, machine) or max(groups, key=lambda g: g.trials[-1])


def machine_here(study: optuna.Study) -> Machine:
    """This machine, as the study's groups recorded theirs: the GPUs its space would run on
    and the versions of the packages they recorded."""
    record = StudyRecord.of(study)
    packages = sorted({name for g in study_groups(study) for name in g.machine.versions})
    gpus = [] if record.space.get("device") == "cpu" or record.endpoint else visible_gpus()
    return this_machine(gpus, packages, endpoint=record.endpoint)


def ranked_view(study: optuna.Study) -> optuna.Study:
    """The study as `best`, `export` and `verify` rank it: the group of this machine, else of
    the machine measured last (the study itself when it holds one group)."""
    ranked = ranked_group(study, machine_here(study))
    return in_group(study, ranked.id if ranked is not None else None)


def _best_of(study: optuna.Study, group: Group) -> tuple[FrozenTrial | None, str]:
    """The group's recommended trial, or None and why it has none."""
    try:
        return recommend(in_group(study, group.id)).trial, ""
    except StudyError as exc:
        return None, str(exc)


def groups_summary(
    study: optuna.Study, ranked: Group | None, machine: Machine
) -> list[dict[str, Any]]:
    """Every group for `best --json`: its machine, its trials, whether it is the one ranked
    and this machine's, and its own recommended trial with its throughput."""
    summary = []
    for group in study_groups(study):
        best, why = _best_of(study, group)
        summary.append(
            {
                "group": group.id,
                "machine": group.machine.written(),
                "machine_words": group.machine.words(),
                "trials": len(group.trials),
                "ranked": ranked is not None and group.id == ranked.id,
                "this_machine": group.matches(machine),
                "best_trial": best.number if best is not None else None,
                "best_tokens_per_s": TrialRecord.of(best).figure(THROUGHPUT) if best else None,
                "no_best_because": why or None,
            }
        )
    return summary


def groups_lines(study: optuna.Study, ranked: Group | None, machine: Machine) -> list[str]:
    """What `best` says of the machines: which one its figures came from, and, when the study
    holds several, each other group's best, not ranked with these."""
    if ranked is None:
        return []
    groups = study_groups(study)
    here = "this machine" if ranked.matches(machine) else "the machine measured last"
    if len(groups) == 1:
        elsewhere = "" if ranked.matches(machine) else " (not this machine)"
        return [f"machine: {ranked.machine.words()}{elsewhere}"]
    lines = [
        f"comparison group: ranked the {len(ranked.trials)} trials measured on {here}, "
        f"{ranked.machine.words()}; the other machines' figures are not ranked with them:"
    ]
    for group in groups:
        if group.id == ranked.id:
            continue
        best, why = _best_of(study, group)
        if best is None:
            found = f"no recommendation ({why})"
        else:
            figure = TrialRecord.of(best).figure(THROUGHPUT)
            rate = f"{figure:.1f} tok/s" if figure is not None else "no throughput"
            found = f"best trial {best.number}, {rate}"
        lines.append(f"  {group.machine.words()}: {len(group.trials)} trials, {found}")
    return lines
