"""A resume on another machine (issue 56), over generated cases: which of the machine's fields
changed (GPU kind, host CPU, cores, each engine version), alone and together, against trials
that recorded their machine and trials stored before machines were (their environment only),
with and without --allow-other-machine.

Each case opens a real SQLite study the way `autotune run` does. Without the flag a changed
machine must be refused in one line naming every changed value and leave the file as it was;
with it, the run's trials get a group of their own; an unchanged machine joins its group
either way. A run in a group of its own queues the reference again (measured on its machine);
one that joins its group does not. Generated from random.Random(SEED), so a failure repeats.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import random
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState
from small_space import small_space

from autotune.errors import StudyError
from autotune.records.machine import EARLIER_GROUP, Machine
from autotune.space import load_space
from autotune.study.plan import StudyPlan, plan_study
from autotune.study.proposals.queueing import queue_reference_and_candidates
from autotune.study.start.opening import open_study

SEED = 56
STORED = {
    "gpu": "NVIDIA H100 80GB HBM3",
    "cpu": "AMD EPYC 7R13 Processor",
    "cores": 16,
    "versions": {"torch": "2.5.1", "transformers": "5.17.0", "ms-swift": "4.6.1"},
}
# A field's other value, and the words the refusal names it by.
OTHER = {
    "gpu": ("NVIDIA H200", "NVIDIA H200"),
    "cpu": ("Intel(R) Xeon(R) Gold 6338", "Intel(R) Xeon(R) Gold 6338"),
    "cores": (32, "32 cores"),
    "torch": ("2.6.0", "torch 2.6.0"),
    "transformers": ("5.18.1", "transformers 5.18.1"),
    "ms-swift": ("4.6.2", "ms-swift 4.6.2"),
}
VERSIONS = ("torch", "transformers", "ms-swift")
# What a trial stored before machines were says (its GPUs and its environment): no host CPU.
EARLIER_KNOWS = ("gpu", "torch", "transformers")


def machine_with(changed: tuple[str, ...]) -> Machine:
    fields: dict[str, Any] = {**STORED, "versions": dict(STORED["versions"])}
    for name in changed:
        if name in VERSIONS:
            fields["versions"][name] = OTHER[name][0]
        else:
            fields[name] = OTHER[name][0]
    return Machine.grouped(**fields)


def earlier_attrs() -> dict[str, Any]:
    """A trial stored before machines were: its GPUs and its environment's versions."""
    versions: dict[str, str] = STORED["versions"]
    return {
        "gpus": [{"index": 0, "name": STORED["gpu"]}],
        "environment": {
            "device": "cuda",
            "torch_version": versions["torch"],
            "transformers_version": versions["transformers"],
        },
    }


def cases() -> list[tuple[str, tuple[str, ...], bool]]:
    """(how the trials stored their machine, the fields changed, the flag given)."""
    rng = random.Random(SEED)
    fields = list(OTHER)
    changes: list[tuple[str, ...]] = [()]
    changes += [(name,) for name in fields]
    pairs = list(itertools.combinations(fields, 2))
    changes += rng.sample(pairs, 6)
    changes += [tuple(rng.sample(fields, 3)), tuple(fields)]
    generated = [("recorded", change, flag) for change in changes for flag in (False, True)]
    earlier = [(), ("gpu",), ("torch",), ("cpu",), ("gpu", "transformers")]
    generated += [("earlier", change, flag) for change in earlier for flag in (False, True)]
    return generated


CASES = cases()


def test_the_generated_cases_cover_every_field_alone_and_together() -> None:
    assert len(CASES) >= 30
    single = {change[0] for _, change, _ in CASES if len(change) == 1}
    assert single == set(OTHER)


@pytest.fixture(scope="module")
def base_plan(tmp_path_factory: pytest.TempPathFactory) -> StudyPlan:
    folder = tmp_path_factory.mktemp("space")
    space = small_space(folder, name="f", params={"batch_size": {"choices": [1, 2]}})
    return plan_study(
        load_space(str(space)), study_name="f", storage_url=f"sqlite:///{folder / 'unused.db'}"
    )


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("stored", "changed", "flag"),
    CASES,
    ids=[f"{s}-{'+'.join(c) or 'same'}-{'flag' if f else 'noflag'}" for s, c, f in CASES],
)
def test_a_changed_machine_is_refused_by_name_or_grouped_apart(
    base_plan: StudyPlan, tmp_path: Path, stored: str, changed: tuple[str, ...], flag: bool
) -> None:
    url = f"sqlite:///{tmp_path / 'f.db'}"
    made = dataclasses.replace(base_plan, storage_url=url, machine=machine_with(()))
    study, _ = open_study(made)
    attrs = earlier_attrs() if stored == "earlier" else {"machine": made.machine.written()}
    for _ in range(2):
        study.add_trial(optuna.trial.create_trial(state=TrialState.FAIL, user_attrs=attrs))
    config = made.space.reference_config().model_dump()
    reference = {**attrs, "is_reference": True, "config": config}
    study.add_trial(optuna.trial.create_trial(values=[10.0, 100.0], user_attrs=reference))
    stored_group = EARLIER_GROUP if stored == "earlier" else made.machine.group
    now = machine_with(changed)
    plan = dataclasses.replace(made, machine=now, allow_other_machine=flag, notes=[])
    before = digest(tmp_path / "f.db")
    known = EARLIER_KNOWS if stored == "earlier" else tuple(OTHER)
    differ = [name for name in changed if name in known]
    if differ and not flag:
        with pytest.raises(StudyError) as refused:
            open_study(plan)
        line = str(refused.value)
        assert "\n" not in line and line.startswith("study 'f' was measured on "), line
        assert "--allow-other-machine" in line, line
        for name in differ:
            assert OTHER[name][1] in line.split("this machine has ")[1], (name, line)
    else:
        resumed, _ = open_study(plan)
        if differ:
            assert plan.machine.group not in (stored_group, None)
            assert any("new comparison group" in note for note in plan.notes), plan.notes
        else:
            assert plan.machine.group == stored_group
            assert not plan.notes
        # The group's fields are this machine's, whichever group it joined.
        assert plan.machine.gpu == now.gpu and plan.machine.versions == now.versions
    assert digest(tmp_path / "f.db") == before  # the check writes nothing
    if differ and not flag:
        return
    # The run queues the reference again exactly when its machine is a group of its own: a
    # group's figures are shown against a reference measured on its machine.
    queue_reference_and_candidates(resumed, plan, room=5)
    queued = [
        t
        for t in resumed.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        if t.user_attrs.get("is_reference") is True
    ]
    assert len(queued) == (1 if differ else 0), (differ, plan.machine.group)


@pytest.mark.parametrize("flag", [False, True])
def test_a_record_whose_machine_was_edited_but_not_its_group_is_another_machine(
    base_plan: StudyPlan, tmp_path: Path, flag: bool
) -> None:
    url = f"sqlite:///{tmp_path / 'f.db'}"
    made = dataclasses.replace(base_plan, storage_url=url, machine=machine_with(()))
    study, _ = open_study(made)
    edited = {**made.machine.written(), "gpu": OTHER["gpu"][0]}  # the group id left as it was
    study.add_trial(
        optuna.trial.create_trial(state=TrialState.FAIL, user_attrs={"machine": edited})
    )
    plan = dataclasses.replace(made, allow_other_machine=flag, notes=[])
    if not flag:
        with pytest.raises(StudyError, match="was measured on NVIDIA H200"):
            open_study(plan)
        return
    open_study(plan)
    assert plan.machine.group == f"{made.machine.group}-2"
