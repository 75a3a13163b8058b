"""Racing accounts for the load on the machine (issue 56): on a busy CPU a wall-clock load
test measures a moment as much as a configuration, so a racing trial run beside more load than
its incumbent's must not be stopped for it.

The real in-process engine on the bundled tiny model, one launch reused for every load test,
with two torch threads so that it is timed on the wall clock. Each round measures the
incumbent and then races the same configuration against it (as fast as the incumbent by
construction: any stop is a wrong one) and one sending smaller images (less work per request:
truly faster), with two CPU hogs (`yes > /dev/null`) started between the incumbent's load test
and the challengers', or running through the incumbent's and stopped before theirs. The claim
is shown over every round, not once: no wrong stop in any.
"""

from __future__ import annotations

import ctypes
import math
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from small_space import MODEL, small_space

from autotune.engines import measure_plan, open_session
from autotune.engines.measurement import to_measurement
from autotune.evalset.dataset import load_evalset
from autotune.measure.convergence import RACED, RaceBound
from autotune.records.parts import Environment
from autotune.space import load_space
from autotune.study.run.racing import wall_clock_wait

ROUNDS = 4
HOGS = 2
# Long enough for the stop rule to settle and race (a race needs settled batch means).
WORKLOAD = {"warmup_requests": 1, "requests": 4, "max_measure_s": 12, "max_warmup_s": 3}


def _die_with_the_test() -> None:
    """In the hog, before `yes` runs: the kernel kills it when the test process dies, so a
    test killed outright (no `finally`) leaves no hog behind."""
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@contextmanager
def cpu_hogs(count: int) -> Iterator[None]:
    """`count` CPU-bound `yes > /dev/null` for the block, killed when it ends however it ends."""
    hogs = [
        subprocess.Popen(
            ["yes"], stdout=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=_die_with_the_test,
        )
        for _ in range(count)
    ]  # fmt: skip
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


pytestmark = pytest.mark.skipif(
    not Path("/proc/self/task").exists(), reason="the kernel keeps no run-queue waits (not Linux)"
)


@pytest.mark.slow
@pytest.mark.xfail(
    reason="issue 56, open: widening the racing bound by the engine's wait share is not yet "
    "enough; a clean-clone CI run (2026-12-07) raced away an as-fast and a faster challenger "
    "in round 2 (wait share 0.72). Kept running so the record shows when the fix holds.",
    strict=False,
)
def test_a_challenger_as_fast_or_faster_is_never_raced_away_by_the_load_beside_it(
    tmp_path: Path,
) -> None:
    path = small_space(tmp_path, name="load", workload=WORKLOAD, cpu_threads=2)
    space = load_space(str(path))
    evalset = load_evalset(space.resolve_path(space.evalset))
    # One small image at a time, short answers: enough requests in a load test for its
    # interval to decide on a busy machine.
    update = {"batch_size": 1, "image_max_side": 64, "max_new_tokens": 8}
    incumbent_config = space.reference_config().model_copy(update=update)
    challengers = {
        "as fast": incumbent_config,
        "faster": incumbent_config.model_copy(update={"image_max_side": 32}),
    }
    session = open_session(space, incumbent_config, model_path=str(MODEL), evalset=evalset)
    wrong_stops, races, widened = [], 0, 0
    try:
        for round_number in range(ROUNDS):
            hogs_first = round_number % 2 == 1  # the hogs toggle between the two sides
            with cpu_hogs(HOGS if hogs_first else 0):
                plan = measure_plan(space, incumbent_config, accuracy_ids=None)
                result = session.measure(incumbent_config, plan, on_phase=None)
            m = to_measurement(
                space, incumbent_config, result, startup_s=0.0, evalset=evalset,
                measure_accuracy=False,
            )  # fmt: skip
            environment = Environment.of(m.environment)
            assert environment.engine_wait_share is not None, m.environment
            rate, ci_rel = (
                m.figures["throughput_output_tokens_per_s"],
                m.figures["throughput_ci_rel"],
            )
            # Its interval's low end; its figure itself where the load was too short for an
            # interval (a busy machine): the strictest bound a challenger can face.
            low = rate * (1 - ci_rel) if math.isfinite(ci_rel) else rate
            bound = RaceBound(tokens_per_s_low=low, wait_share=wall_clock_wait(environment))
            for name, config in challengers.items():
                with cpu_hogs(0 if hogs_first else HOGS):
                    raced = session.measure(
                        config, measure_plan(space, config, accuracy_ids=None, race=bound),
                        on_phase=None,
                    )  # fmt: skip
                races += 1
                shares = [e["wait_share"] for e in raced.stop_rule_trail if "wait_share" in e]
                widened += any(bound.slowed_by(share) > 1.0 for share in shares)
                if raced.stop_reason == RACED:
                    wrong_stops.append((round_number, name, raced.stop_rule_trail[-1]))
    finally:
        session.close()
    print(f"{races} races, {widened} of them widened by the load, wrong stops: {wrong_stops}")
    assert wrong_stops == [], wrong_stops
    # The rounds with the hogs beside the challengers did read a heavier load and widen.
    assert widened >= 1
