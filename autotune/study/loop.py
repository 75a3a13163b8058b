"""The Optuna study: the reference trial first, then the sampler's trials, each contained.

`run_study` is what `autotune run` calls. Each trial runs its engine in another process
(autotune.runner), records its figures as user attributes and its constraint values, and a
failed trial is a FAIL with its reason while the study goes on.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import SCHEMA_VERSION, __version__
from autotune.accuracy.paired import PairedComparison, compare
from autotune.accuracy.reuse import (
    accuracy_key,
    find_reusable,
    screening_request,
    stored_accuracy,
)
from autotune.accuracy.scoring import AccuracyReport
from autotune.checkpoints.source import resolve_model
from autotune.client.chat import normalize_base_url
from autotune.errors import SpaceError, StudyError, TrialFailure
from autotune.evalset.dataset import EvalSet, load_evalset
from autotune.measure.measurement import Measurement, measure
from autotune.params import TrialConfig
from autotune.space import SearchSpace
from autotune.study.artifacts import ArtifactRecorder
from autotune.study.progress import Progress
from autotune.study.select import CONSTRAINT_NAMES, reference_trial
from autotune.study.storage import default_storage_url, open_storage


@dataclass
class StudyPlan:
    """Everything `run` needs, resolved and checked before the database is touched."""

    space: SearchSpace
    model: str
    model_path: str
    evalset: EvalSet
    study_name: str
    storage_url: str
    endpoint: str | None = None
    notes: list[str] = field(default_factory=list)
    dummy_weights: bool = False


def plan_study(
    space: SearchSpace,
    *,
    model: str | None = None,
    study_name: str | None = None,
    storage_url: str | None = None,
    endpoint: str | None = None,
    evalset: str | None = None,
    dummy_weights: bool = False,
) -> StudyPlan:
    """Resolve the model and the eval set; every error here leaves no database behind.

    With `endpoint` the trials measure that running server, and only request-side parameters
    are searched (SearchSpace.for_endpoint). With `dummy_weights` every backend loads a
    random-weight checkpoint of the model's architecture (autotune.checkpoints.dummy) and accuracy
    is switched off.
    """
    if dummy_weights and endpoint is not None:
        raise SpaceError("--dummy-weights cannot apply to --endpoint: that server has its weights")
    notes: list[str] = []
    if endpoint is not None:
        space = space.for_endpoint()
    else:
        space, notes = space.runnable_here()
    model_id = model if model is not None else space.resolve_path(space.model)
    # An endpoint already serves its model: nothing is loaded here, so nothing is downloaded.
    if dummy_weights:
        from autotune.checkpoints.dummy import REASON, dummy_checkpoint, without_accuracy

        space = without_accuracy(space)
        model_path = dummy_checkpoint(model_id, device=space.device)
        notes.append(f"{REASON} (checkpoint: {model_path})")
    else:
        model_path = model_id if endpoint is not None else resolve_model(model_id)
    loaded_evalset = load_evalset(evalset or space.resolve_path(space.evalset))
    name = study_name or space.name
    return StudyPlan(
        space=space,
        model=model_id,
        model_path=model_path,
        evalset=loaded_evalset,
        study_name=name,
        storage_url=storage_url or default_storage_url(name),
        endpoint=normalize_base_url(endpoint) if endpoint is not None else None,
        notes=notes,
        dummy_weights=dummy_weights,
    )


def _study_attrs(plan: StudyPlan) -> dict[str, Any]:
    space = plan.space
    return {
        "space_name": space.name,
        "space_file": str(space.source) if space.source else None,
        "space": space.model_dump(mode="json"),
        "model": plan.model,
        "model_path": plan.model_path,
        "evalset": str(plan.evalset.path),
        "objective_metrics": [o.metric for o in space.objectives],
        "endpoint": plan.endpoint,
        "notes": plan.notes,
        "dummy_weights": plan.dummy_weights,
        "autotune_version": __version__,
        "schema_version": SCHEMA_VERSION,
    }


def open_study(plan: StudyPlan) -> optuna.Study:
    space = plan.space
    storage = open_storage(plan.storage_url, create=True)
    # Failed trials are reported by our progress lines; Optuna's own warning would add a
    # traceback for every contained failure.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(
            seed=space.seed,
            multivariate=True,
            group=True,  # conditional parameters (sampling only when do_sample, ...)
            n_startup_trials=space.sampler.n_startup_trials or max(2, min(10, space.trials // 3)),
        )
        study = optuna.create_study(
            study_name=plan.study_name,
            storage=storage,
            directions=space.directions(),
            sampler=sampler,
            load_if_exists=True,
        )
    stored = study.user_attrs.get("objective_metrics")
    wanted = [o.metric for o in space.objectives]
    if stored is not None and stored != wanted:
        raise StudyError(
            f"study '{plan.study_name}' optimises {stored}, not {wanted}; "
            "use another --study name for a different space"
        )
    if stored is not None and study.user_attrs.get("endpoint") != plan.endpoint:
        where = study.user_attrs.get("endpoint") or "servers autotune starts itself"
        raise StudyError(
            f"study '{plan.study_name}' measured {where}; resume it the same way, or use "
            "another --study name"
        )
    if stored is not None and bool(study.user_attrs.get("dummy_weights")) != plan.dummy_weights:
        how = "with" if study.user_attrs.get("dummy_weights") else "without"
        raise StudyError(
            f"study '{plan.study_name}' was run {how} --dummy-weights; resume it the same way, "
            "or use another --study name"
        )
    if stored is None:
        for key, value in _study_attrs(plan).items():
            study.set_user_attr(key, value)
        # Named objectives: optuna-dashboard labels its axes with them instead of "Objective 0".
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(wanted)
    return study


def _constraints(
    space: SearchSpace, m: Measurement, paired: PairedComparison | None
) -> dict[str, float]:
    """Constraint values (<= 0 is feasible) in CONSTRAINT_NAMES order."""
    c = space.constraints
    values = dict.fromkeys(CONSTRAINT_NAMES, 0.0)
    if c.accuracy.enabled and m.accuracy is not None:
        if c.accuracy.mode == "absolute":
            values["accuracy"] = c.accuracy.min - m.accuracy.accuracy
        elif paired is not None:
            diff = paired.ci_low if c.accuracy.test == "bootstrap" else paired.accuracy_diff
            values["accuracy"] = -c.accuracy.max_drop - diff
    if c.memory_budget_mib is not None and "peak_memory_mib" in m.figures:
        values["memory"] = m.figures["peak_memory_mib"] - c.memory_budget_mib
    if c.latency_slo_ms is not None and "e2e_latency_p95_ms" in m.figures:
        values["latency"] = m.figures["e2e_latency_p95_ms"] - c.latency_slo_ms
    return values


def _record_constraints(trial: optuna.Trial, values: dict[str, float]) -> None:
    """Constraint values for the sampler (Optuna's set_constraint) and for our own readers."""
    trial.set_user_attr("constraints", values)
    for name in CONSTRAINT_NAMES:
        trial.set_constraint(name, values[name])


class _Objective:
    def __init__(self, plan: StudyPlan, progress: Progress) -> None:
        self.plan = plan
        self.progress = progress
        self.artifacts = ArtifactRecorder(plan.storage_url, plan.study_name)

    def __call__(self, trial: optuna.Trial) -> list[float]:
        plan, space = self.plan, self.plan.space
        config = space.suggest(trial)
        output_key = accuracy_key(config, plan.evalset)
        trial.set_user_attr("config", config.model_dump())
        trial.set_user_attr("output_key", output_key)
        self.progress.trial_started(trial.number, config)
        is_reference = bool(trial.user_attrs.get("is_reference"))
        twin = None if is_reference else _identical_trial(trial.study, config)
        if twin is not None:
            return self._copy_twin(trial, twin)
        reference = None if is_reference else await_reference(trial.study, space)
        cached = find_reusable(trial.study, output_key)
        try:
            m = measure(
                space,
                config,
                model_path=plan.model_path,
                evalset=plan.evalset,
                # Random weights answer noise: no accuracy pass, no screening (dummy_weights).
                measure_accuracy=cached is None and not plan.dummy_weights,
                screening=None
                if cached or plan.dummy_weights
                else screening_request(space, plan.evalset, reference),
                on_phase=self.progress.phase,
                endpoint=plan.endpoint,
            )
        except TrialFailure as failure:
            trial.set_user_attr("failure_kind", failure.kind)
            trial.set_user_attr("failure_reason", failure.reason)
            trial.set_user_attr("log_tail", failure.log_tail[-4000:])
            self.artifacts.log_tail(trial, failure.log_tail)
            raise
        if cached is not None:
            m.accuracy = stored_accuracy(cached)
            m.predictions = dict(cached.user_attrs.get("predictions") or {})
            trial.set_user_attr("accuracy_reused_from", cached.number)
        trial.set_user_attr("answers_computed", 0 if cached else len(m.predictions))
        for key, value in m.user_attrs().items():
            trial.set_user_attr(key, value)
        paired = None
        if reference is not None and m.accuracy is not None:
            paired = _judge(trial, m.accuracy, reference, space)
        _record_constraints(trial, _constraints(space, m, paired))
        self.artifacts.sample_outputs(trial, plan.evalset, m)
        if m.screened_out:
            raise optuna.TrialPruned(
                f"screening: accuracy already below the floor on {len(m.predictions)} items"
            )
        return [float(m.user_attrs()[o.metric]) for o in space.objectives]

    def _copy_twin(self, trial: optuna.Trial, twin: FrozenTrial) -> list[float]:
        """The sampler proposed a configuration already measured: record it, don't re-run it.

        GPU time goes to configurations not yet seen; `duplicate_of` says where the figures
        came from.
        """
        for key, value in twin.user_attrs.items():
            if key not in _NOT_INHERITED:
                trial.set_user_attr(key, value)
        trial.set_user_attr("duplicate_of", twin.number)
        trial.set_user_attr("answers_computed", 0)
        if twin.user_attrs.get("is_reference") and "item_passed" in twin.user_attrs:
            # The reference's twin is still a candidate: judged like every other one (a zero
            # difference), not left without a comparison.
            _judge(trial, stored_accuracy(twin), twin, self.plan.space)
        _record_constraints(trial, dict(twin.user_attrs["constraints"]))
        return list(twin.values)


def _judge(
    trial: optuna.Trial, accuracy: AccuracyReport, reference: FrozenTrial, space: SearchSpace
) -> PairedComparison:
    """Compare a candidate's answers with the reference's, item by item, and record it."""
    ref_accuracy = stored_accuracy(reference)
    paired = compare(
        accuracy.item_scores,
        ref_accuracy.item_scores,
        candidate_passed=accuracy.item_passed,
        reference_passed=ref_accuracy.item_passed,
        confidence=space.constraints.accuracy.confidence,
    )
    trial.set_user_attr("paired_vs_reference", paired.to_dict())
    return paired


# Attributes that describe a trial's own run, not its configuration's figures.
_NOT_INHERITED = frozenset(
    {"is_reference", "sample_outputs_artifact", "accuracy_reused_from", "answers_computed"}
)


def _identical_trial(study: optuna.Study, config: TrialConfig) -> FrozenTrial | None:
    wanted = config.model_dump()
    for other in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if other.user_attrs.get("config") == wanted and "constraints" in other.user_attrs:
            return other
    return None


def await_reference(study: optuna.Study, space: SearchSpace) -> FrozenTrial | None:
    """The completed reference; waits while another process (a shared study) still runs it.

    Without it a relative floor cannot be judged, and a candidate must never pass unjudged.
    """
    accuracy = space.constraints.accuracy
    needs_reference = accuracy.enabled and accuracy.mode == "relative"
    deadline = time.monotonic() + space.trial_timeout_s
    while True:
        reference = reference_trial(study)
        if reference is not None or not needs_reference:
            return reference
        pending = [
            t
            for t in study.get_trials(
                deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING)
            )
            if t.user_attrs.get("is_reference")
        ]
        if not pending or time.monotonic() > deadline:
            raise TrialFailure(
                "no completed reference trial to compare with (it failed or is missing); "
                "run the study again to retry the reference",
                kind="no-reference",
            )
        time.sleep(5)


def _ensure_reference(study: optuna.Study, space: SearchSpace) -> None:
    pending = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    if reference_trial(study) is None and not any(
        t.user_attrs.get("is_reference") for t in pending
    ):
        study.enqueue_trial(space.reference_params(), user_attrs={"is_reference": True})


def run_study(
    plan: StudyPlan,
    *,
    trials: int | None = None,
    timeout_s: float | None = None,
    progress: Progress | None = None,
) -> optuna.Study:
    """Run (or resume) the study until it holds `trials` finished trials."""
    target = trials if trials is not None else plan.space.trials
    study = open_study(plan)
    finished = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    remaining = max(0, target - len(finished))
    progress = progress or Progress(total=target)
    progress.start(done=len(finished), study_name=plan.study_name)
    for note in plan.notes:
        progress.note(note)
    if remaining == 0:
        progress.note(f"study '{plan.study_name}' already has {len(finished)} finished trials")
        return study
    _ensure_reference(study, plan.space)

    def after_trial(study: optuna.Study, trial: FrozenTrial) -> None:
        progress.trial_finished(study, trial)
        if trial.user_attrs.get("is_reference") and trial.state != TrialState.COMPLETE:
            relative = plan.space.constraints.accuracy.mode == "relative"
            if relative and plan.space.constraints.accuracy.enabled:
                raise StudyError(
                    f"the reference trial failed ({trial.user_attrs.get('failure_reason', '?')}); "
                    "the relative accuracy floor needs it — fix the cause and run again"
                )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.optimize(
            _Objective(plan, progress),
            n_trials=remaining,
            timeout=timeout_s,
            catch=(TrialFailure,),
            # Several processes (machines sharing one storage) stop together at the target.
            callbacks=[after_trial, optuna.study.MaxTrialsCallback(target, states=None)],
            gc_after_trial=False,
        )
    progress.finish(study)
    return study
