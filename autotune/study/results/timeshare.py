"""Where a study's time went: start-up, warm-up (compile), measuring, accuracy, the rest.

Every trial records `time_s` (autotune.study.run.objective): the start-up it paid (zero when it
reused a running launch), its warm-up, its measured requests, its accuracy pass and its wall
time. Summed over the study, the shares say how much of the trial time bought measurements.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial

from autotune.records.parts import TimeSplit
from autotune.records.stored import TrialRecord

PARTS = (
    "startup",
    "warmup",
    "measuring",
    "screening",
    "accuracy",
    "recording",
    "waiting",
    "proposal",
    "study_reads",
    "hand_off",
    "failed",
)
# Waiting is recorded in two parts: for GPUs to free up, for a twin trial measured elsewhere.
WAITS = ("gpu_wait", "twin_wait")
# The engine's phases: what is left of the engine call beside them is the hand-off.
ENGINE_PHASES = ("warmup", "measuring", "screening", "accuracy")
# What the study process spends around the engine, each timed (autotune.study.run.objective):
# the sampler's proposal with the trial's configuration written to the storage; the reads of
# the study before measuring (the reference, reusable answers, the racing incumbent); and the
# hand-off: the engine call less its phases (the plan and the result between autotune and its
# worker process or HTTP client, the live estimate's writes).
NAMED = {
    "proposal": "sampler and config writes",
    "study_reads": "study reads",
    "hand_off": "engine hand-off",
    "failed": "failed trials' engine calls",
}
# What no part times: the trial's few other storage writes (owner, launch) and the progress
# line's own reads of the study.
OTHER = "storage writes, progress lines"


@dataclass(frozen=True)
class TimeShare:
    total_s: float
    parts_s: dict[str, float]
    launches: int
    # Every trial that recorded its time (autotune.study.results.counting says what each was).
    trials: int

    @property
    def other_s(self) -> float:
        return max(0.0, self.total_s - sum(self.parts_s.values()))

    def share(self, part: str) -> float:
        value = self.other_s if part == "other" else self.parts_s.get(part, 0.0)
        return value / self.total_s if self.total_s > 0 else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "total_s": self.total_s,
            **{f"{part}_s": self.parts_s[part] for part in PARTS},
            "other_s": self.other_s,
            "measuring_share": self.share("measuring"),
            "launches": self.launches,
            "trials": self.trials,
        }

    def line(self) -> str:
        if self.total_s <= 0:
            return "no trial time recorded yet"
        parts = ", ".join(
            f"{name} {self.share(key):.0%}"
            for key, name in (
                ("startup", "start-up"),
                ("warmup", "warm-up/compile"),
                ("measuring", "measuring"),
                ("screening", "screening"),
                ("accuracy", "accuracy"),
                ("recording", "recording"),
                ("waiting", "waiting"),
                *NAMED.items(),
                ("other", f"other ({OTHER})"),
            )
            # A part no trial spent time in says nothing; measuring always shows.
            if key == "measuring" or round(100 * self.share(key)) > 0
        )
        # No count of trials here: the counts line (autotune.study.results.counting) says what
        # they were.
        launches = f"{self.launches} launch" + ("" if self.launches == 1 else "es")
        return f"{self.total_s:.0f} s of trial time on {launches}: {parts}"


def part_seconds(split: TimeSplit, part: str, *, failed: bool = False) -> float:
    """A part's seconds in one trial's time split; a part it could not time (an endpoint's
    start-up is NaN: autotune did not start it) counts as none. A failed trial records no
    engine phase, so its engine call is its own part ("failed"), never a hand-off."""
    if part in ("hand_off", "failed"):
        if (part == "failed") != failed:  # the engine call is one or the other
            return 0.0
        engine = split.engine_call
        if not math.isfinite(engine) or engine <= 0:
            return 0.0
        return max(0.0, engine - sum(part_seconds(split, key) for key in ENGINE_PHASES))
    keys = WAITS if part == "waiting" else (part,)
    return sum(split.finite(key) for key in keys)


def trial_parts(record: TrialRecord) -> dict[str, float]:
    """Each part's seconds in one trial's record (part_seconds), its failure deciding where
    its engine call goes; a NaN part counts as none."""
    failed = record.failure_kind is not None
    return {part: part_seconds(record.times, part, failed=failed) for part in PARTS}


@contextmanager
def timed(time_s: dict[str, float], part: str) -> Iterator[None]:
    """Add the block's seconds to `time_s[part]`, whether it ends or raises."""
    start = time.perf_counter()
    try:
        yield
    finally:
        time_s[part] = time_s.get(part, 0.0) + time.perf_counter() - start


def trial_seconds(trial: FrozenTrial) -> float:
    return TrialRecord.of(trial).times.total


def budget_seconds(trial: FrozenTrial) -> float:
    """What a trial costs a wall-clock budget: its time without its waits (for GPUs, for
    another worker measuring the same configuration), times its share of the run's GPUs (two
    workers on two GPUs spend the budget at wall-clock pace)."""
    record = TrialRecord.of(trial)
    split = record.times
    busy = split.total - (split.gpu_wait + split.twin_wait)
    share = record.gpu_share if record.gpu_share is not None else 1.0
    return max(0.0, busy) * float(share)


def time_share(trials: list[FrozenTrial]) -> TimeShare:
    parts = dict.fromkeys(PARTS, 0.0)
    total = 0.0
    launches: set[str] = set()
    timed = 0
    for trial in trials:
        record = TrialRecord.of(trial)
        split = record.time_s
        if split is None:
            continue
        timed += 1
        total += split.total
        for part, seconds in trial_parts(record).items():
            parts[part] += seconds
        if record.launch_id:
            launches.add(record.launch_id)
    return TimeShare(
        total_s=total,
        parts_s=parts,
        launches=len(launches),
        trials=timed,
    )


def study_time_share(study: optuna.Study) -> TimeShare:
    return time_share([t for t in study.get_trials(deepcopy=False) if t.state.is_finished()])
