"""What `autotune report` shows, read from the study: top configurations with their deploy
commands, the reference, sample outputs, parameter importances and the environment.

Only reads the storage and the artifact folder; the HTML is assembled in html.py.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import AutotuneError
from autotune.export import Export
from autotune.params import DEPLOY_TARGETS, PARAM_NAMES, base_param
from autotune.records.repeats import impossible_repeats
from autotune.records.repeats import measured as measured_trials
from autotune.records.repeats import repeats as valid_repeats
from autotune.records.stored import StudyRecord, TrialRecord
from autotune.study.results.counting import TrialCounts, trial_counts
from autotune.study.results.exports import export_trial
from autotune.study.results.select import (
    NoDeployableTrial,
    Recommendation,
    deploy_target,
    infeasible_trials,
    is_feasible,
    objective_names,
    recommend,
    reference_trial,
)
from autotune.study.results.timeshare import TimeShare, study_time_share

TOP_N = 5
SAMPLE_ROWS = 12
# PED-ANOVA compares the best tenth of the trials with the rest: with fewer trials than this
# the "best tenth" is one trial and the importances say nothing.
MIN_IMPORTANCE_TRIALS = 5
# Under this many, the best tenth is one trial: one lucky measurement decides the ranking.
FIRM_IMPORTANCE_TRIALS = 20


@dataclass
class TopConfig:
    trial: FrozenTrial
    recommended: bool
    feasible: bool
    on_front: bool
    exports: dict[str, Export | str]  # an error message where the target cannot serve it


@dataclass
class Importances:
    """Importance per parameter for each target; `message` says why there are none."""

    by_target: dict[str, dict[str, float]] = field(default_factory=dict)
    message: str = ""
    trials: int = 0  # the distinct measured trials they rest on (no repeated proposal twice)

    @property
    def basis(self) -> str:
        """What the importances rest on, with a caveat while that is too little to rank."""
        basis = f"from {self.trials} measured trials (repeated proposals once)"
        if self.trials < FIRM_IMPORTANCE_TRIALS:
            basis += (
                f"; PED-ANOVA compares the best tenth of the trials with the rest, and under "
                f"{FIRM_IMPORTANCE_TRIALS} that tenth is a single trial, so read this as a hint"
            )
        return basis


@dataclass
class ReportData:
    study: optuna.Study
    trials: list[FrozenTrial]
    complete: list[FrozenTrial]  # completed and measured: a repeated proposal is not one
    counts: TrialCounts
    repeats: list[FrozenTrial]  # proposals of a measured configuration, figures copied
    # One line for each stored duplicate_of that does not hold (autotune.records.repeats).
    impossible_repeats: list[str]
    recommendation: Recommendation | None  # None: no trial reproduces on the deploy target
    no_recommendation: str
    what_ifs: list[tuple[FrozenTrial, str]]
    deploy_target: str | None
    time: TimeShare
    infeasible: dict[int, list[str]]
    reference: FrozenTrial | None
    top: list[TopConfig]
    samples: list[dict[str, Any]]
    samples_total: int
    samples_right: int
    reference_answers: dict[str, str]
    importances: Importances
    environment: dict[str, Any]
    # USD per hour for the cost per million tokens (autotune.report.headline); None: none given.
    gpu_price_per_hour: float | None = None


def finite(value: Any) -> float | None:
    """A plottable number, or None for missing, non-numeric and NaN figures."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def params_words(params: dict[str, Any]) -> str:
    """`name=value` words; a sampled float shows 3 significant digits (temperature=0.731, not
    0.7310594627360019). The export keeps the exact value."""
    return " ".join(
        f"{name}={value:.3g}" if isinstance(value, float) else f"{name}={value}"
        for name, value in params.items()
    )


def why_no_tpot(record: TrialRecord) -> str | None:
    """Why a completed trial has no time per output token (NaN), or None when it has one or
    did not complete: TPOT needs answers of two tokens or more, streamed in several pieces."""
    tpot = record.figure("tpot_p50_ms")
    if tpot is None or math.isfinite(tpot):
        return None
    tokens = record.figure("output_tokens_per_request")
    if tokens is not None and tokens < 2:
        return "its answers were one token long"
    return "no answer of two tokens or more arrived in several pieces (not streamed)"


def reference_why(
    study: optuna.Study,
    rec: Recommendation,
    measured: list[FrozenTrial],
    infeasible: dict[int, list[str]],
) -> list[str]:
    """Why the recommended trial (the reference, when it is) won: each `measured` trial
    faster than it, and what kept it out (a constraint, the deploy target, a tie decided by
    the next objective)."""
    throughput = "throughput_output_tokens_per_s"
    base = finite(TrialRecord.of(rec.trial).figure(throughput))
    speeds = {t.number: finite(TrialRecord.of(t).figure(throughput)) or 0.0 for t in measured}
    faster = sorted(
        (t for t in measured if base is not None and speeds[t.number] > base),
        key=lambda t: -speeds[t.number],
    )
    if not faster:
        return [f"no other measured trial was faster ({len(measured) - 1} measured besides it)"]
    what_ifs = {t.number: why for t, why in rec.what_ifs}
    ties = {t.number for t in rec.ties}
    front = {t.number for t in rec.front}
    names = objective_names(study)
    top = rec.top if names and names[0] == throughput else None
    second = names[1] if len(names) > 1 else "next objective"
    lines = []
    for trial in faster:
        rel = TrialRecord.of(trial).throughput_interval_rel()
        speed = f"{speeds[trial.number]:.1f}" + (f" ±{rel:.1%}" if rel is not None else "")
        if trial.number in infeasible:
            why = f"is infeasible: {'; '.join(infeasible[trial.number])}"
        elif trial.number in what_ifs:
            why = f"is a what-if: {what_ifs[trial.number]}"
        elif trial.number in ties:
            why = (
                "ties with it (the throughput difference lies inside its interval) and has "
                f"the worse {second}"
            )
        elif trial.number in front and top is not None:
            # Ties are a difference test, which is not transitive: a trial can lie between
            # the top and the recommendation tied with it, and tie with neither.
            why = (
                f"is slower than trial {top.number}, the fastest, beyond their interval, while "
                f"the recommendation ties with trial {top.number} and has the better {second}"
            )
        else:
            why = "is off the feasible Pareto front: another trial is as fast with lower latency"
        lines.append(f"trial {trial.number} ({speed} tok/s) {why}")
    return lines


def what_ifs_title(what_ifs: list[tuple[FrozenTrial, str]]) -> str:
    """The heading over the what-if table: it names the reference only when the table holds it."""
    if any(TrialRecord.of(trial).is_reference for trial, _ in what_ifs):
        return "what-ifs and the reference"
    return "what-ifs"


def changed_params(trial: FrozenTrial, reference: FrozenTrial | None) -> dict[str, Any]:
    """The parameters whose value differs from the reference's (all searched ones without one)."""
    config = TrialRecord.of(trial).config
    base = TrialRecord.of(reference).config if reference is not None else {}
    searched = {base_param(key) for key in trial.params}
    names = [n for n in PARAM_NAMES if n in searched or (base and n in config)]
    return {n: config.get(n) for n in names if not base or config.get(n) != base.get(n)}


def _exports(study: optuna.Study, trial: FrozenTrial) -> dict[str, Export | str]:
    out: dict[str, Export | str] = {}
    target = deploy_target(study)
    formats = [target] if target else []
    for fmt in [*formats, *(f for f in DEPLOY_TARGETS if f != target)]:
        try:
            out[fmt], _ = export_trial(study, trial_number=trial.number, fmt=fmt)
        except AutotuneError as exc:
            out[fmt] = str(exc)
        except Exception as exc:  # an old or hand-edited trial config: say so, keep the report
            out[fmt] = f"cannot render: {type(exc).__name__}: {exc}"
    return out


def top_configs(
    study: optuna.Study, rec: Recommendation | None, measured: list[FrozenTrial]
) -> list[TopConfig]:
    """The recommended trial first, then the deployable feasible front, then the other
    deployable feasible trials of `measured` (what-ifs have their own table; a repeated
    proposal is its twin's row, not one of its own)."""
    if rec is None:
        return []
    complete = measured
    what_ifs = {t.number for t, _ in rec.what_ifs}
    sign = 1.0 if study.directions[0] == optuna.study.StudyDirection.MAXIMIZE else -1.0
    front_numbers = {t.number for t in rec.front}
    feasible = sorted(
        (t for t in complete if is_feasible(t) and t.number not in what_ifs),
        key=lambda t: (t.number not in front_numbers, -sign * t.values[0], t.number),
    )
    chosen = [rec.trial, *(t for t in feasible if t.number != rec.trial.number)][:TOP_N]
    return [
        TopConfig(
            trial=t,
            recommended=t.number == rec.trial.number,
            feasible=is_feasible(t),
            on_front=t.number in front_numbers,
            exports=_exports(study, t),
        )
        for t in chosen
    ]


def _artifact_rows(trial: FrozenTrial, store: Any) -> list[dict[str, Any]] | None:
    artifact_id = TrialRecord.of(trial).sample_outputs_artifact
    if store is None or not artifact_id:
        return None
    try:
        with store.open_reader(artifact_id) as reader:
            rows = json.loads(reader.read().decode("utf-8"))
    except Exception:  # a moved or pruned artifact folder: fall back to the stored answers
        return None
    return rows if isinstance(rows, list) else None


def sample_outputs(trial: FrozenTrial, store: Any) -> list[dict[str, Any]]:
    """Per-item rows (id, category, prompt, answer, references, score, passed) of a trial.

    From its sample_outputs.json artifact; without one, from the answers and scores stored
    as user attributes (no prompts or references then).
    """
    rows = _artifact_rows(trial, store)
    if rows is not None:
        return rows
    record = TrialRecord.of(trial)
    predictions, scores, passed = record.predictions, record.item_scores, record.item_passed
    return [
        {"id": i, "answer": a, "score": scores.get(i), "passed": passed.get(i)}
        for i, a in sorted(predictions.items())
    ]


def _shown_samples(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Right and wrong answers alike, alternating (each in item order) while both last: what
    the recommended trial reads correctly is as much the story as what it misses."""
    by_id = sorted(rows, key=lambda r: str(r.get("id")))
    right = [r for r in by_id if r.get("passed")]
    wrong = [r for r in by_id if not r.get("passed")]
    shown: list[dict[str, Any]] = []
    while len(shown) < SAMPLE_ROWS and (right or wrong):
        for group in (right, wrong):
            if group and len(shown) < SAMPLE_ROWS:
                shown.append(group.pop(0))
    return shown


def importances(study: optuna.Study, measured: list[FrozenTrial]) -> Importances:
    """PED-ANOVA importances (what optuna-dashboard uses; needs no scikit-learn) over the
    `measured` trials only: a repeated proposal would count its configuration twice."""
    if len(measured) < MIN_IMPORTANCE_TRIALS:
        return Importances(
            message=f"needs at least {MIN_IMPORTANCE_TRIALS} measured trials "
            f"({len(measured)} so far)"
        )
    names = objective_names(study)
    result = Importances(trials=len(measured))
    distinct = _study_of(study, measured)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "too few trials" warnings: the numbers say it
        for index, (name, direction) in enumerate(zip(names, study.directions, strict=True)):
            # PED-ANOVA takes lower as better.
            sign = -1.0 if direction == optuna.study.StudyDirection.MAXIMIZE else 1.0
            try:
                values = optuna.importance.get_param_importances(
                    distinct,
                    evaluator=optuna.importance.PedAnovaImportanceEvaluator(),
                    target=lambda t, i=index, s=sign: s * t.values[i],
                )
            except Exception as exc:  # e.g. a single value per parameter
                return Importances(message=f"cannot compute importances: {exc}")
            result.by_target[name] = values
    if not any(any(v > 0 for v in values.values()) for values in result.by_target.values()):
        result.message = "no parameter made a measurable difference yet"
    return result


def _study_of(study: optuna.Study, trials: list[FrozenTrial]) -> optuna.Study:
    """An in-memory study holding `trials` only, for Optuna's importance evaluators (they
    read every completed trial of the study they are given)."""
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "new study created" line
    try:
        subset = optuna.create_study(directions=study.directions)
    finally:
        optuna.logging.set_verbosity(verbosity)
    subset.add_trials(trials)
    return subset


def environment(study: optuna.Study, trials: list[FrozenTrial]) -> dict[str, Any]:
    """Where the study ran: the recorded device and versions, model and eval set."""
    env: dict[str, Any] = {}
    for trial in trials:  # the first trial that recorded one: all share the machine
        recorded = TrialRecord.of(trial).environment.stored()  # as written, engines' keys too
        if recorded:
            env.update(recorded)
            break
    attrs = StudyRecord.of(study).model_dump()
    for key in ("model", "evalset", "space_name", "endpoint", "autotune_version"):
        if attrs.get(key) is not None:
            env[key] = attrs[key]
    env["optuna_version"] = optuna.__version__
    return env


def collect(
    study: optuna.Study, *, artifact_store: Any = None, gpu_price_per_hour: float | None = None
) -> ReportData:
    """Everything the report shows, read once. `artifact_store` may be None (no artifacts)."""
    trials = study.get_trials(deepcopy=False)
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    complete = measured_trials(done, trials)
    rec: Recommendation | None
    try:
        rec, no_rec, what_ifs = recommend(study), "", []
        what_ifs = rec.what_ifs
    except NoDeployableTrial as exc:
        rec, no_rec, what_ifs = None, str(exc), exc.what_ifs
    reference = reference_trial(study)
    rows = sample_outputs(rec.trial, artifact_store) if rec is not None else []
    reference_answers: dict[str, str] = {}
    if reference is not None and rec is not None and reference.number != rec.trial.number:
        reference_answers = {
            str(r.get("id")): r.get("answer") or ""
            for r in sample_outputs(reference, artifact_store)
        }
    return ReportData(
        study=study,
        trials=trials,
        complete=complete,
        counts=trial_counts(study, trials),
        repeats=valid_repeats(done, trials),
        impossible_repeats=impossible_repeats(trials),
        recommendation=rec,
        no_recommendation=no_rec,
        what_ifs=what_ifs,
        deploy_target=deploy_target(study),
        time=study_time_share(study),
        infeasible=infeasible_trials(study, complete),
        reference=reference,
        top=top_configs(study, rec, complete),
        samples=_shown_samples(rows),
        samples_total=len(rows),
        samples_right=sum(1 for row in rows if row.get("passed")),
        reference_answers=reference_answers,
        importances=importances(study, complete),
        environment=environment(study, trials),
        gpu_price_per_hour=gpu_price_per_hour,
    )


def named_beside(trials: list[FrozenTrial], rec: Recommendation | None) -> list[FrozenTrial]:
    """Of a study's `trials`: the reference, every named candidate and the engine's defaults
    (whatever their outcome) and the recommendation, in trial order, so known recipes are read
    beside what the search found; empty for a study with neither."""
    named = [t for t in trials if _named(TrialRecord.of(t))]
    if not named:
        return []
    recommended = rec.trial.number if rec is not None else None
    return [
        t for t in trials if t in named or TrialRecord.of(t).is_reference or t.number == recommended
    ]


def _named(record: TrialRecord) -> bool:
    """A named candidate, or the deploy target's defaults (the baseline)."""
    return bool(record.candidate or record.baseline)
