"""The parts of a space file besides its parameters: constraints, workload, sampler, launches.

Each is a strict pydantic model: an unknown key or a value out of range is refused with the
field's name, so a typo in a space file never silently falls back to a default.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from autotune.errors import did_you_mean
from autotune.measure.registry import METRICS, Direction
from autotune.params import refuse_bool_for_number

# Upper bounds of the numbers a space gives, each far beyond any real use: a value past them is
# a typo or a unit mistake (`max_measure_s: 1e300`), which would otherwise run until the trial
# timed out and then blame the trial (issue 30). Each field's description says why its bound.
DAY_S = 86_400.0
MAX_TRIAL_TIMEOUT_S = 7 * DAY_S
MAX_BUDGET_S = 30 * DAY_S
MAX_COUNT = 100_000


class _Strict(BaseModel):
    # NaN passes every bound (each comparison with it is false) and an infinite time-out or
    # range is never what a space means: numbers must be finite.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_number(cls, value: Any, info: ValidationInfo) -> Any:
        return refuse_bool_for_number(value, info, cls)


class ParamSpec(_Strict):
    """How one parameter is searched: a list of choices or a numeric range."""

    choices: list[Any] | None = Field(None, description="Values to choose from.")
    low: float | None = Field(None, description="Lower bound of a numeric range.")
    high: float | None = Field(None, description="Upper bound of a numeric range.")
    step: float | None = Field(None, gt=0, description="Grid step of a numeric range.")
    log: bool = Field(False, description="Sample the range on a log scale.")
    when: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="Applies only when each named parameter takes one of the listed values.",
    )

    @model_validator(mode="after")
    def _choices_or_range(self) -> ParamSpec:
        has_range = self.low is not None or self.high is not None
        if (self.choices is None) == (not has_range):
            raise ValueError("give either 'choices' or both 'low' and 'high'")
        if has_range and (self.low is None or self.high is None):
            raise ValueError("a range needs both 'low' and 'high'")
        if has_range and self.low > self.high:  # type: ignore[operator]
            raise ValueError(f"low ({self.low}) is above high ({self.high})")
        if self.choices is not None and not self.choices:
            raise ValueError("'choices' is empty")
        if self.choices is not None and (self.step is not None or self.log):
            raise ValueError("'step' and 'log' apply to a 'low'/'high' range, not to 'choices'")
        if self.step is not None and self.log:
            raise ValueError(
                "step and log cannot be combined (Optuna samples a log range without steps)"
            )
        if self.log and self.low is not None and self.low <= 0:
            raise ValueError(f"a log range needs low above 0 (low is {self.low})")
        return self


class Confirmation(_Strict):
    """Held-out items that confirm a trial before it is recommended (autotune.accuracy.confirm):
    the search floor never looks at them, so the recommendation's own error is bounded."""

    enabled: bool = Field(
        True,
        description="false: recommend the fastest trial the floor passed, each verdict wrong at "
        "most 1 - confidence of the time but the recommendation with no bound of its own.",
    )
    items: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="Items held out of the search floor's pool; None: what a candidate that "
        "loses nothing, answering unlike the reference on 5% of items (identical answers with "
        "identical_answers_only), needs to be confirmed 9 times in 10 at the first "
        "confirmation's error (`autotune evalset needs` prints it).",
    )


class AccuracyConstraint(_Strict):
    """The accuracy floor: absolute, or relative to the reference trial."""

    mode: Literal["relative", "absolute"] = Field("relative", description="Kind of floor.")
    max_drop: float = Field(
        0.05,
        gt=0.0,
        le=1.0,
        description="relative: allowed drop below the reference (above 0, at most 1). 0 would "
        "ask every candidate to be shown better than the reference, not no worse.",
    )
    min: float = Field(0.0, ge=0.0, le=1.0, description="absolute: lowest allowed accuracy.")
    test: Literal["sequential", "bootstrap", "point"] = Field(
        "sequential",
        description="'sequential': answer the set a stage at a time and stop once a confidence "
        "sequence of the paired difference shows the candidate loses less than max_drop "
        "(feasible) or more (infeasible); undecided when the set runs out, which is infeasible "
        "(autotune.accuracy.sequential). 'bootstrap': answer every item, feasible when the "
        "lower end of a bootstrap interval is above -max_drop. 'point': compare means only.",
    )
    confidence: float = Field(
        0.95,
        gt=0.5,
        lt=1.0,
        description="sequential: each verdict is wrong with probability at most 1 - confidence, "
        "over all its looks (a candidate that loses max_drop or more is accepted at most that "
        "often); bootstrap: the two-sided interval's level.",
    )
    enabled: bool = Field(True, description="Switch the floor off (for ablations only).")
    identical_answers_only: bool = Field(
        False,
        description="The space wants candidates that answer word for word as the reference: "
        "its set may then be too small to pass one whose answers differ (a study refuses such "
        "a set otherwise, saying what `autotune evalset needs` says).",
    )
    confirmation: Confirmation = Field(
        default_factory=Confirmation,
        description="The held-out items that confirm the recommendation "
        "(autotune.accuracy.confirm).",
    )


class Screening(_Strict):
    """Answer a fixed subset first; prune a trial already worse than the floor with confidence."""

    items: int = Field(
        0,
        ge=0,
        le=1_000_000,
        description="Subset size; 0 switches screening off. At most 1,000,000 (more items "
        "than any evaluation set holds).",
    )
    confidence: float = Field(
        0.95,
        gt=0.5,
        lt=1.0,
        description="Kept so older spaces load; screening is now the floor's first look and "
        "prunes at the floor's own confidence (constraints.accuracy.confidence).",
    )


class Constraints(_Strict):
    accuracy: AccuracyConstraint = Field(default_factory=AccuracyConstraint)
    memory_budget_mib: float | None = Field(
        None,
        gt=0,
        le=16 * 1024 * 1024,
        description="Peak memory budget (at most 16 TiB, past any machine's memory).",
    )
    latency_slo_ms: float | None = Field(
        None,
        gt=0,
        le=DAY_S * 1000,
        description="p95 end-to-end latency SLO (at most a day: no request is allowed longer).",
    )


class Objective(_Strict):
    metric: str = Field(description="A metric name from autotune.measure.registry.")
    direction: Direction | None = Field(None, description="Defaults to the metric's own.")

    @model_validator(mode="after")
    def _known_metric(self) -> Objective:
        if self.metric not in METRICS:
            raise ValueError(
                f"unknown metric '{self.metric}': {did_you_mean(self.metric, METRICS)}"
                f"known: {', '.join(METRICS)}"
            )
        if self.direction is None:
            self.direction = METRICS[self.metric].direction
        return self


# The longest forced answer (Workload.output_tokens).
MAX_OUTPUT_TOKENS = 16_384


class Workload(_Strict):
    """The measured load: the trial's concurrency from the first request, measured once settled.

    The load cycles `requests` requests of the eval set (at least one full batch) in a
    category-balanced order. Its start is the warm-up: it lasts one full turnover of the batch
    and until the streamed-token rate settles (MSER-5), at most `max_warmup_s`. The steady
    window then runs until the `ci_confidence` interval of its throughput (batch means over
    time windows) lies within +-`target_ci_rel`, or until `max_measure_s`, or `max_requests`
    (autotune.measure.convergence). With `output_tokens` every load-test answer is exactly
    that long, so trials do equal work whatever their decoding settings.
    """

    warmup_requests: int = Field(
        2,
        ge=1,
        le=10_000,
        description="The warm-up lasts at least until this many requests have completed "
        "(besides one full turnover of the batch and a settled rate). At most 10,000: a "
        "warm-up that long is a measurement of its own.",
    )
    requests: int = Field(
        32,
        ge=1,
        le=MAX_COUNT,
        description="Requests the load cycles through (never fewer than one batch); at most "
        "100,000 (each is prepared before the load starts).",
    )
    max_requests: int = Field(
        8192,
        ge=2,
        le=10 * MAX_COUNT,
        description="Most load-test requests of one trial (at most 1,000,000).",
    )
    max_measure_s: float = Field(
        60,
        gt=0,
        le=DAY_S,
        description="Most seconds of steady window (after the warm-up) in one trial; at most a "
        "day, and with max_warmup_s below trial_timeout_s, or the trial would be timed out "
        "before its load test could end.",
    )
    max_warmup_s: float = Field(
        30,
        gt=0,
        le=DAY_S,
        description="Most seconds the load may take to settle; a trial that has not settled "
        "by then is measured anyway and flagged (warmup_settled 0). At most a day (see "
        "max_measure_s).",
    )
    reference_max_s: float = Field(
        20,
        gt=0,
        le=DAY_S,
        description="Most seconds of the reference's load test, warm-up and steady window "
        "together, where the deploy target cannot run the reference: its speed is then only "
        'the context of the "x the reference" figure, so it is not worth a full warm-up and '
        "window. Its figure carries the interval measured by then, or says it has none. At "
        "most a day (see max_measure_s).",
    )
    racing: bool = Field(
        True,
        description="Stop a trial's load test once its throughput interval lies wholly below "
        "the incumbent's (autotune.study.run.racing): it is recorded as stopped by racing with its "
        "partial figures, and the time goes to the contenders. false: every trial measures to "
        "its target interval or cap.",
    )
    launch_spread_rel: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Relative standard deviation of a configuration's throughput between fresh "
        "launches of its engine, as measured on this kind of machine (bench/results/). A load "
        "test's own interval cannot see it; it widens every recorded throughput interval "
        "(throughput_ci_rel), so a relaunch lands inside it. Trials on one launch are compared "
        "without it.",
    )
    output_tokens: int | None = Field(
        None,
        ge=1,
        le=MAX_OUTPUT_TOKENS,
        description="Force every load-test answer to exactly this many tokens (min_tokens / "
        "ignore_eos on servers, min_new_tokens in-process), so trials do equal work and "
        "max_new_tokens is no speed knob; the accuracy pass answers freely. None: answers as "
        "long as the model makes them. At most 16,384: one answer that long takes minutes "
        "even on an H200, and a load test needs many.",
    )
    output_tokens_spread: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Spread of the forced answer lengths around output_tokens: request k of "
        "every trial asks for the k-th length of one seeded sequence, uniform within "
        "output_tokens +- this share (autotune.measure.lengths). Equal lengths let a saturated "
        "server lock into waves of prefill and decode that differ from launch to launch; 0: "
        "every answer exactly output_tokens. Servers only: in-process static batches answer "
        "exactly output_tokens.",
    )
    target_ci_rel: float = Field(
        0.03,
        gt=0,
        lt=1,
        description="Stop once the throughput's interval is within +- this share of the value.",
    )
    ci_confidence: float = Field(0.95, gt=0.5, lt=1, description="Confidence of that interval.")
    accuracy_batch_size: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="Batch (requests in flight) of the accuracy pass; None = the trial's own. "
        "Greedy answers do not depend on it (tests/accuracy/test_output_neutral.py), so a larger "
        "one only makes the pass faster.",
    )
    request_rate_per_s: float | None = Field(
        None,
        gt=0,
        le=MAX_COUNT,
        description="Server backends: open-loop Poisson arrivals at this rate (at most "
        "100,000 per second, past any server); None = closed loop with batch_size requests "
        "in flight.",
    )
    startup_timeout_s: float = Field(
        600,
        gt=0,
        le=DAY_S,
        description="Server backends: time allowed until /v1/models answers (at most a day).",
    )
    repeat_image_share: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Share of load-test requests that resend an image (and prompt) already "
        "sent in the same trial; every other request carries an image no cache has seen (the "
        "item's image with an invisible per-request mark), so caches help only as much as the "
        "workload repeats (autotune.measure.repeats).",
    )

    @model_validator(mode="after")
    def _max_not_below_two_passes(self) -> Workload:
        if self.max_requests < 2 * self.requests:
            raise ValueError(
                f"max_requests ({self.max_requests}) is below two passes of requests "
                f"({self.requests})"
            )
        return self

    @model_validator(mode="after")
    def _spread_needs_a_length(self) -> Workload:
        if self.output_tokens_spread and self.output_tokens is None:
            raise ValueError(
                "output_tokens_spread spreads forced answer lengths, but output_tokens is not "
                "set; set output_tokens (the mean length) or remove output_tokens_spread"
            )
        return self

    def pass_requests(self, batch_size: int) -> int:
        """Requests in one pass: at least one full batch, so a batch of 64 is really tested
        with 64 requests in flight and not with the few a small workload would send."""
        return max(self.requests, batch_size)

    def most_requests(self, batch_size: int) -> int:
        return max(self.max_requests, 2 * self.pass_requests(batch_size))


class SamplerSettings(_Strict):
    """How the study proposes configurations (autotune.study.proposals.sampler.make_sampler)."""

    kind: Literal["tpe", "random"] = Field(
        "tpe",
        description="tpe: one-lever steps from the incumbent first (steps), then Optuna's "
        "TPESampler, its start-up covering the big levers "
        "(autotune.study.proposals.sampler). random: "
        "Optuna's RandomSampler, its proposals drawn uniformly (random search, with `steps: "
        "false`: the baseline of bench/cpu/replay.py); the reference and named candidates still "
        "come first, launches are still reused.",
    )
    n_startup_trials: int | None = Field(
        None,
        ge=1,
        le=MAX_COUNT,
        description="TPE's random trials first; default: from the budget (a quarter of the "
        "trials it should buy, 4-10), or a third of --trials (2-10) without one. At most "
        "100,000, the most trials a study runs.",
    )
    steps: bool = Field(
        True,
        description="Propose one-lever steps from the incumbent before the sampler's own "
        "proposals (autotune.study.proposals.steering): every other level of image side and "
        "concurrency on "
        "the running launch, then launches with one launch parameter changed "
        "(launches.launch_steps); a step that wins is the next steps' incumbent. false: the "
        "sampler from the first proposal.",
    )


def _default_objectives() -> list[Objective]:
    return [
        Objective(metric="throughput_output_tokens_per_s"),
        Objective(metric="e2e_latency_p95_ms"),
    ]


class LaunchSettings(_Strict):
    """How long one engine launch is kept for request-time trials (autotune.study.run.launches)."""

    trials_per_launch: int = Field(
        4,
        ge=1,
        le=MAX_COUNT,
        description="Trials measured on one launch (request-time settings proposed by the "
        "sampler with the launch parameters fixed) before the sampler chooses freely again.",
    )
    max_repeated_proposals: int = Field(
        3,
        ge=1,
        le=MAX_COUNT,
        description="Proposals of already-measured configurations in a row that end a launch "
        "early: the sampler has little left to try on it.",
    )
    launch_steps: int = Field(
        3,
        ge=0,
        le=MAX_COUNT,
        validation_alias=AliasChoices("launch_steps", "random_launches"),
        description="Launches the steps may open (sampler.steps): each the incumbent's launch "
        "with one launch parameter changed and its request-time settings, the value tried on "
        "the fewest launches first. TPE learns nothing about a launch parameter until launches "
        "differ in it. 0: no launch steps. `random_launches`, its earlier name, is read too.",
    )

    @model_validator(mode="before")
    @classmethod
    def _one_spelling(cls, data: Any) -> Any:
        """Both names at once: one value is taken when they agree, else one line saying
        which to keep (not "unknown field" for the name that is also read)."""
        if isinstance(data, dict) and {"launch_steps", "random_launches"} <= data.keys():
            data = dict(data)
            earlier = data.pop("random_launches")
            if repr(earlier) != repr(data["launch_steps"]):  # True == 1, yet not the same
                raise ValueError(
                    f"launch_steps ({data['launch_steps']!r}) and random_launches ({earlier!r}, "
                    "its earlier name) are both given and differ: keep launch_steps alone"
                )
        return data


class Candidate(_Strict):
    """A named configuration measured right after the reference (a known recipe)."""

    name: str = Field(min_length=1, max_length=80, description="Label in `best` and the report.")
    config: dict[str, Any] = Field(description="TrialConfig values; unset ones: the reference's.")


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")


def parse_duration(value: Any) -> float:
    """Seconds from 90, "90", "90s", "30m", "1h" or "1h30m"; ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        text = str(value).strip().lower()
        try:
            seconds = float(text)
        except ValueError:
            match = _DURATION.match(text)
            if not text or match is None or not any(match.groups()):
                raise ValueError(
                    f"{value!r} is not a duration; write e.g. 90s, 30m, 1h or 1h30m"
                ) from None
            hours, minutes, secs = (float(part or 0) for part in match.groups())
            seconds = hours * 3600 + minutes * 60 + secs
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{value!r} is not a positive duration")
    if seconds > MAX_BUDGET_S:
        raise ValueError(
            f"{value!r} is more than 30 days ({MAX_BUDGET_S:.0f} s), the longest budget; a "
            "study can be resumed for more"
        )
    return seconds
