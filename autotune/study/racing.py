"""Racing: a trial that cannot beat the study's incumbent stops measuring at once.

The incumbent is the trial the study would recommend now (autotune.study.select.recommend),
when it meets every constraint. The recommendation is the best throughput, a later
objective (p95 latency, say) breaking ties between overlapping intervals only; so a trial
whose throughput interval lies wholly below the incumbent's can no longer be recommended.
The stop rule (autotune.measure.convergence) ends such a load as soon as that is known; the
trial is then PRUNED, with its partial figures and the reason, and never reaches the
accuracy pass. The reference is never raced (every other trial is judged against it), and a
study whose first objective is not throughput is not raced at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn

import optuna

from autotune.engines.measurement import Measurement
from autotune.errors import StudyError
from autotune.measure.convergence import RaceBound
from autotune.measure.summary import with_launch_spread
from autotune.records.stored import TrialRecord
from autotune.space import SearchSpace
from autotune.study.select import is_feasible, objective_names, recommend, throughput_interval

THROUGHPUT = "throughput_output_tokens_per_s"


@dataclass(frozen=True)
class Incumbent:
    number: int
    tokens_per_s: float
    bound: RaceBound

    def reason(self, tokens_per_s: float | None, ci_rel: float | None) -> str:
        figure = "-" if tokens_per_s is None else f"{tokens_per_s:.1f}"
        interval = "" if ci_rel is None else f" ±{ci_rel:.1%}"
        return (
            f"stopped by racing: {figure}{interval} tok/s lies below trial {self.number}'s "
            f"{self.tokens_per_s:.1f} tok/s (interval from {self.bound.tokens_per_s_low:.1f})"
        )


def incumbent(study: optuna.Study, *, spread_rel: float) -> Incumbent | None:
    """The trial to race, or None: the study ranks by something else first, or no feasible
    trial with a throughput interval has finished yet."""
    names = objective_names(study)
    if not names or names[0] != THROUGHPUT:
        return None
    try:
        best = recommend(study)
    except StudyError:  # nothing completed, or nothing deployable yet
        return None
    if not best.feasible or not is_feasible(best.trial):
        return None
    interval = throughput_interval(best.trial)
    if interval is None:
        return None
    return Incumbent(
        number=best.trial.number,
        tokens_per_s=TrialRecord.of(best.trial).figure(THROUGHPUT) or 0.0,
        bound=RaceBound(tokens_per_s_low=interval[0], spread_rel=spread_rel),
    )


def spread_of(space: SearchSpace) -> float:
    """The share a relaunch may move a figure by, as a half-width at the space's confidence:
    what a racing trial's own interval lacks next to the incumbent's recorded one."""
    workload = space.workload
    return with_launch_spread(0.0, workload.launch_spread_rel, workload.ci_confidence)


def report_running_rate(trial: optuna.Trial, trail: list[dict[str, Any]]) -> None:
    """The load's running rate as Optuna intermediate values (step: seconds into the load),
    for optuna-dashboard's intermediate-value plot. Optuna takes them from single-objective
    studies only."""
    if len(trial.study.directions) != 1:
        return
    for entry in trail:
        rate, elapsed = entry.get("tokens_per_s"), entry.get("elapsed_s")
        if isinstance(rate, int | float) and isinstance(elapsed, int | float):
            trial.report(float(rate), step=int(elapsed))


def record_raced(
    trial: optuna.Trial, m: Measurement, rival: Incumbent, launch_id: str, trail: list[Any]
) -> NoReturn:
    """PRUNED, with the figures measured until the race was lost and the reason: the sampler
    learns the region is worse, and the study's time goes to the contenders."""
    m.environment = {**m.environment, "launch_id": launch_id}
    for key, value in m.user_attrs().items():
        if key != "time_s":
            trial.set_user_attr(key, value)
    reason = rival.reason(m.figures.get(THROUGHPUT), m.figures.get("throughput_ci_rel"))
    trial.set_user_attr("raced_by", rival.number)
    trial.set_user_attr("raced_reason", reason)
    report_running_rate(trial, trail)
    raise optuna.TrialPruned(reason)
