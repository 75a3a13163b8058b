"""The reference's answers, a stage at a time as far as the candidates' floors need
(ReferenceStages), and the answers cache that keeps them (cache_key, answers_folder).

How long the reference's load test runs, and the first deployable figure's, is the trial's
plan (autotune.study.run.trial_plan).
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import optuna

from autotune import __version__
from autotune.accuracy.answers_cache import (
    FOLDER,
    AnswersCache,
    AnswersKey,
    evalset_digest,
    model_digest,
)
from autotune.accuracy.confirm import search_order
from autotune.accuracy.reuse import answered_prefix, reference_stages
from autotune.accuracy.scoring import AccuracyReport, score_predictions
from autotune.accuracy.timed import TimedPass, timed_text
from autotune.backends import BACKENDS
from autotune.engines.identity import engine_version
from autotune.engines.session import MeasurePlan, accuracy_batch_size, measure_plan
from autotune.errors import TrialFailure
from autotune.params import TrialConfig
from autotune.records.reference import ReferenceExtension, study_extensions
from autotune.records.stored import StudyRecord, TrialRecord
from autotune.records.writer import write_study
from autotune.space import SearchSpace
from autotune.study.plan import StudyPlan
from autotune.study.results.progress import Progress
from autotune.study.results.select import reference_trial
from autotune.study.run.launches import LaunchScheduler
from autotune.study.store.storage import STUDIES_DIR, local_file


def answers_folder(storage_url: str) -> Path:
    """Where the answers cache lives: beside a study file (studies/answers/ by default),
    else in studies/."""
    stored = local_file(storage_url)
    return (stored.parent if stored is not None else STUDIES_DIR) / FOLDER


def _installed(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def cache_key(plan: StudyPlan, config: TrialConfig) -> AnswersKey | None:
    """The answers cache key of `config`'s answers in this study; None where they are not
    cached: an endpoint's server (its weights are not ours to hash), LoRA
    adapters, or a model that is no local checkpoint."""
    if plan.endpoint is not None or plan.adapters:
        return None
    backend = BACKENDS.get(config.backend)
    checkpoint = plan.model_path
    if backend is not None and backend.loads_quantized_checkpoints:
        checkpoint = plan.quantized_paths.get(config.weight_quant, checkpoint)
    model = model_digest(checkpoint, answers_folder(plan.storage_url))
    if model is None:
        return None
    engine = {
        "autotune": __version__,
        "engine": engine_version(config.backend) if backend and backend.package else "in-process",
        "torch": _installed("torch"),
        "transformers": _installed("transformers"),
        "device": plan.space.device,
        "gpus": ",".join(sorted({gpu.name for gpu in plan.gpus})),
        # A dummy checkpoint's entries hold the timed pass's answer lengths, never answers.
        "answers": "timed lengths" if plan.dummy_weights else "answers",
        "engine_args": json.dumps(
            plan.space.engine_args.for_format(config.backend), sort_keys=True
        ),
    }
    return AnswersKey(model, evalset_digest(plan.evalset), config.output_key(), engine)


def answers_only(space: SearchSpace, config: TrialConfig, ids: list[str]) -> MeasurePlan:
    """A plan that answers `ids` at `config`'s accuracy batch and measures nothing."""
    plan = measure_plan(space, config, accuracy_ids=ids)
    return plan.model_copy(update={"load_test": False, "workload_requests": 0})


def timed_only(
    space: SearchSpace, config: TrialConfig, ids: list[str], lengths: dict[str, int]
) -> MeasurePlan:
    """A plan that answers `ids` for their time alone, each forced to its length in
    `lengths` (dummy weights: autotune.accuracy.timed), and measures nothing."""
    timed = TimedPass(order=ids, stages=[len(ids)], lengths={i: lengths[i] for i in ids})
    plan = measure_plan(space, config, accuracy_ids=None, timed=timed)
    return plan.model_copy(update={"load_test": False, "workload_requests": 0})


@dataclass(frozen=True)
class ReferenceAnswers:
    """The reference's answers so far (its trial's and its extensions'), scored."""

    predictions: dict[str, str]
    report: AccuracyReport


class ReferenceStages:
    """The reference's answers, paid for as far as the decisions need.

    The reference trial answers the first of `stages` (the floor's first stage at which a
    candidate can pass: autotune.accuracy.reuse.reference_stages). A candidate's floor looks
    at the items both answered, so one still undecided at the end of the reference's answers
    asks for the next stage (`extend`): the reference is launched again beside the idle
    candidate (in process, at its accuracy batch), answers those items and is stopped; the
    answers are stored on the study (autotune.records.reference) and in the answers cache,
    where a later study on the same model and set finds them. The reference's key is locked
    while it answers, so workers of one host that need the same stage compute it once.
    With dummy weights the same stages are timed (autotune.accuracy.timed): their answers
    are lengths (`timed_text`), kept as a real extension's are, and never scored.
    """

    def __init__(self, plan: StudyPlan, launches: LaunchScheduler, progress: Progress) -> None:
        self.plan = plan
        self.launches = launches
        self.progress = progress
        self.config = plan.space.reference_config()
        self.batch = accuracy_batch_size(plan.space, self.config)
        self.stages = reference_stages(plan.space, plan.evalset, batch=self.batch)
        floor = plan.space.constraints.accuracy
        # Whether candidates are judged on the reference's answers a stage at a time.
        self.staged = floor.enabled and floor.test == "sequential" and floor.mode == "relative"
        self.order = search_order(plan.space, plan.evalset)  # the held-out: answers_for
        self.timed = plan.timed_accuracy  # dummy weights: the floor the timed pass stands for
        if self.timed is not None:
            self.stages = self.timed.reference_stages(self.batch)
            self.staged = self.timed.needed is not None
            self.order = list(self.timed.order)
        self.cache = AnswersCache(answers_folder(plan.storage_url))
        self.key = cache_key(plan, self.config)
        self._categories = {item.id: item.category for item in plan.evalset.items}
        self._noted: set[str] = set()  # problems already said once

    def note_once(self, line: str) -> None:
        if line not in self._noted:
            self._noted.add(line)
            self.progress.note(line)

    def answers(self, study: optuna.Study) -> ReferenceAnswers | None:
        """What the completed reference has answered, its extensions included; None
        before it has completed."""
        trial = reference_trial(study, self.plan.group)
        if trial is None:
            return None
        record = TrialRecord.of(trial)
        predictions = dict(record.predictions)
        predictions |= {i: timed_text(n) for i, n in record.accuracy_timed_tokens.items()}
        scores = dict(record.item_scores)
        passed = dict(record.item_passed)
        parts, problems = study_extensions(study)
        for problem in problems:
            self.note_once(f"reference: an extension is left out (unreadable: {problem})")
        for part in parts:
            predictions |= part.predictions
            scores |= part.item_scores
            passed |= part.item_passed
        by_category: dict[str, list[float]] = {}
        for item_id, score in scores.items():
            by_category.setdefault(self._categories.get(item_id, "?"), []).append(score)
        report = AccuracyReport(
            accuracy=sum(scores.values()) / len(scores) if scores else math.nan,
            by_category={name: sum(v) / len(v) for name, v in sorted(by_category.items())},
            item_scores=scores,
            item_passed=passed,
        )
        return ReferenceAnswers(predictions, report)

    def stage(self, answered: int) -> int:
        """The reference's stage (1: its trial's) once it has answered `answered` items."""
        return 1 + sum(1 for size in self.stages[1:] if size <= answered)

    def line(self, answered: int, *, extra: str = "") -> str:
        """'reference: 384 of 3000 items answered (stage 2)'."""
        total, stage = len(self.order), self.stage(answered)
        return f"reference: {answered} of {total} items answered (stage {stage}{extra})"

    def next_stage(self, answered: int) -> int:
        """The items answered after the reference's next stage."""
        return next((size for size in self.stages if size > answered), len(self.order))

    def answers_for(
        self, study: optuna.Study, ids: list[str], *, for_trial: int | None
    ) -> AccuracyReport:
        """The reference's scores on `ids`, answering those it has not answered yet (the
        floor's next stage, or any other items: a holdout's)."""
        known = self.answers(study)
        if known is None:
            raise TrialFailure(
                "no completed reference trial to answer with; run the study again to retry "
                "the reference",
                kind="no-reference",
            )
        if any(item_id not in known.predictions for item_id in ids):
            self.extend(study, ids, for_trial=for_trial)
            known = self.answers(study)
            assert known is not None
        wanted = [i for i in ids if i in known.report.item_scores]
        report = known.report
        return AccuracyReport(
            accuracy=sum(report.item_scores[i] for i in wanted) / len(wanted)
            if wanted
            else math.nan,
            by_category={},
            item_scores={i: report.item_scores[i] for i in wanted},
            item_passed={i: report.item_passed[i] for i in wanted},
        )

    def extend(self, study: optuna.Study, ids: list[str], *, for_trial: int | None) -> None:
        """Answer those of `ids` the reference has not answered: from the answers cache, else
        by launching the reference beside the running launch. Stored on the study as one
        extension, and in the cache; TrialFailure when the reference cannot answer."""
        lock = self.cache.locked(self.key) if self.key is not None else contextlib.nullcontext()
        with lock:
            known = self.answers(study)
            have = known.predictions if known is not None else {}
            missing = [item_id for item_id in ids if item_id not in have]
            if not missing:  # another worker answered them while this one waited
                return
            started, clock = datetime.now(UTC), time.perf_counter()
            cached = self._cached()
            answers = {i: cached[i] for i in missing if i in cached}
            todo = [item_id for item_id in missing if item_id not in answers]
            computed = self._answer(todo, self._measured_config(study)) if todo else {}
            answers |= computed
            if self.key is not None and computed:
                self.cache.write(self.key, {**have, **answers})
            seconds = time.perf_counter() - clock
            answered = answered_prefix(self.order, {**have, **answers})
            self._store(study, answers, len(computed), started, seconds, answered, for_trial)
        how = how_answered(len(answers), len(answers) - len(computed), seconds)
        whom = f" for trial {for_trial}" if for_trial is not None else ""
        self.progress.note(self.line(answered, extra=f": {len(answers)} more{whom}{how}"))

    def _cached(self) -> dict[str, str]:
        if self.key is None:
            return {}
        cached = self.cache.read(self.key, self.plan.evalset)
        if cached.refused is not None:
            self.note_once(f"answers cache: refused {cached.refused}; answered again")
        return cached.answers

    def _measured_config(self, study: optuna.Study) -> TrialConfig:
        """The reference's configuration as its trial ran it (with the values the sampler
        derives, which decide its launch), else as the space names it."""
        trial = reference_trial(study, self.plan.group)
        stored = TrialRecord.of(trial).config if trial is not None else None
        with contextlib.suppress(ValueError, TypeError):
            return TrialConfig.model_validate(stored)
        return self.config

    def _answer(self, ids: list[str], config: TrialConfig) -> dict[str, str]:
        """The reference's answers to `ids`: on the running launch when it is the
        reference's, else on a launch of its own beside it, stopped after."""
        plan = answers_only(self.plan.space, config, ids)
        if self.timed is not None:
            lengths = {i: min(self.timed.lengths[i], config.max_new_tokens) for i in ids}
            plan = timed_only(self.plan.space, config, ids, lengths)
        running = self.launches.serving(config)
        session = running or self.launches.open_aside(config, on_phase=None)
        try:
            result = session.measure(config, plan, on_phase=None)
        finally:
            if running is None:
                session.close()
        if self.timed is not None:
            return {i: timed_text(n) for i, n in result.timed_tokens.items()}
        return result.predictions

    def _store(
        self,
        study: optuna.Study,
        answers: dict[str, str],
        computed: int,
        started: datetime,
        seconds: float,
        answered: int,
        for_trial: int | None,
    ) -> None:
        # Timed answers are lengths: nothing to score.
        report = score_predictions(self.plan.evalset, answers if self.timed is None else {})
        extension = ReferenceExtension(
            stage=self.stage(answered),
            answered_items=answered,
            predictions=answers,
            item_scores=report.item_scores,
            item_passed=report.item_passed,
            computed=computed,
            cache_entry=self.key.id if self.key is not None and computed < len(answers) else None,
            for_trial=for_trial,
            started=started.isoformat(timespec="seconds"),
            seconds=seconds,
            batch_size=self.batch,
        )
        write_study(study, StudyRecord.part(**{extension.key(): extension.model_dump()}))


def how_answered(count: int, served: int, seconds: float) -> str:
    """How an extension's `count` items were answered, `served` of them by the answers cache:
    ' in 41 s', ' in 41 s; 20 of them from the answers cache', or ', all from the answers
    cache' (nothing was answered, so no time is given)."""
    if count and served == count:
        return ", all from the answers cache"
    cached = f"; {served} of them from the answers cache" if served else ""
    return f" in {seconds:.0f} s{cached}"


def extend_or_note(
    stages: ReferenceStages, study: optuna.Study, ids: list[str], *, for_trial: int, without: str
) -> bool:
    """The reference answers those of `ids` it has not (ReferenceStages.extend) for trial
    `for_trial`; False where it cannot, noted with what the trial does `without` them."""
    try:
        stages.extend(study, ids, for_trial=for_trial)
    except TrialFailure as failure:
        stages.progress.note(
            f"reference: could not answer more items ({failure.reason}); trial {for_trial} "
            f"{without}"
        )
        return False
    return True


def extend_next_stage(
    stages: ReferenceStages, study: optuna.Study, answered: int, *, for_trial: int, without: str
) -> bool:
    """The reference's next stage past its first `answered` items, as a candidate whose floor
    needs more asks for it (extend_or_note); False where it could not, or where nothing was
    added (an extension that did not store), so the caller stops asking."""
    wanted = stages.order[answered : stages.next_stage(answered)]
    if not extend_or_note(stages, study, wanted, for_trial=for_trial, without=without):
        return False
    reference = stages.answers(study)
    return reference is not None and answered_prefix(stages.order, reference.predictions) > answered
