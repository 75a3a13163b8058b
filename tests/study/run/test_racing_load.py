"""Racing accounts for the load on the machine (issue 56): on a busy CPU a wall-clock load
test measures a moment as much as a configuration, so a racing trial run beside more load than
its incumbent's must not be stopped for it.

The real in-process engine on the bundled tiny model, one launch reused for every load test,
with two torch threads so that it is timed on the wall clock. Each round measures the
incumbent and then races the same configuration against it (as fast as the incumbent by
construction: any stop is a wrong one) and one sending smaller images (less work per request:
truly faster), with two CPU hogs (`yes > /dev/null`) started between the incumbent's load test
and the challengers', or running through the incumbent's and stopped before theirs. A stop
goes through racing's check (the incumbent measured again beside the same load), as in a
study. The claim is shown over every round, not once: no wrong stop in any.
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
from autotune.study.run.racing import QUIET_WAIT_SHARE, Incumbent, checked_stop, wall_clock_wait

ROUNDS = 4
HOGS = 2
# Long enough for the stop rule to settle and race (a race needs settled batch means).
WORKLOAD = {"warmup_requests": 1, "requests": 4, "max_measure_s": 12, "max_warmup_s": 3}
# The check's test needs a race to stop its load, and on a machine this busy a request takes
# seconds: room for the batch means a race needs (a raced load ends at the race).
CHECK_WORKLOAD = {"warmup_requests": 1, "requests": 4, "max_measure_s": 40, "max_warmup_s": 5}


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
    wrong_stops, stops, checks, busy = [], 0, 0, 0
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
            rival = Incumbent(number=0, tokens_per_s=rate, bound=bound, config=incumbent_config)
            for name, config in challengers.items():
                raced_plan = measure_plan(space, config, accuracy_ids=None, race=bound)
                with cpu_hogs(0 if hogs_first else HOGS):
                    raced = session.measure(config, raced_plan, on_phase=None)
                    final, checked = checked_stop(session, space, config, raced_plan, raced, rival)
                stops += raced.stop_reason == RACED
                checks += checked.check is not None
                waited = wall_clock_wait(Environment.of(raced.environment))
                busy += not hogs_first and waited >= QUIET_WAIT_SHARE
                print(
                    f"round {round_number} {name}: {raced.stop_reason}, then "
                    f"{final.stop_reason}; waited {waited:.2f} (incumbent {bound.wait_share:.2f})"
                )
                if final.stop_reason == RACED:
                    wrong_stops.append((round_number, name, checked.check, raced.stop_rule_trail))
    finally:
        session.close()
    print(f"{stops} stops by the race alone, {checks} checked, wrong stops: {wrong_stops}")
    assert wrong_stops == [], wrong_stops
    # The hogs beside the challengers were read as load: any stop there would be checked.
    assert busy >= 1


@pytest.mark.slow
def test_a_stop_beside_load_the_incumbent_measured_again_does_not_confirm_is_withdrawn(
    tmp_path: Path,
) -> None:
    """racing.checked_stop on the real engine beside two CPU hogs: a trial stopped by a figure
    no load here reaches (as if recorded on a quiet, faster machine) is checked against the
    incumbent measured again on its launch, which ties it (the same configuration), so the
    stop is withdrawn and the trial measured in full; the check records both figures and the
    load each side saw. (The rule's other outcomes: tests/study/run/test_racing.py.)"""
    path = small_space(tmp_path, name="check", workload=CHECK_WORKLOAD, cpu_threads=2)
    space = load_space(str(path))
    evalset = load_evalset(space.resolve_path(space.evalset))
    # The lightest requests: the most of them, so the most batch means, in a busy second.
    update = {"batch_size": 1, "image_max_side": 32, "max_new_tokens": 4}
    config = space.reference_config().model_copy(update=update)
    far = Incumbent(number=3, tokens_per_s=1e6, bound=RaceBound(1e6), config=config)
    plan = measure_plan(space, config, accuracy_ids=None, race=far.bound)
    session = open_session(space, config, model_path=str(MODEL), evalset=evalset)
    try:
        with cpu_hogs(HOGS):
            raced = session.measure(config, plan, on_phase=None)
            final, checked = checked_stop(session, space, config, plan, raced, far)
    finally:
        session.close()
    # The recorded figure alone stopped it, beside a load the engine waited for.
    assert raced.stop_reason == RACED, raced.stop_rule_trail[-1:]
    check = checked.check
    assert check is not None and check.kept is False, check
    assert check.incumbent == 3 and check.recorded_tokens_per_s == 1e6
    assert check.wait_share is not None and check.wait_share >= QUIET_WAIT_SHARE
    assert check.incumbent_wait_share is not None
    assert check.incumbent_tokens_per_s is not None and check.incumbent_tokens_per_s < 1e6
    assert check.incumbent_measured_s is not None and check.incumbent_measured_s > 0
    # Withdrawn: measured again, in full, with no race to stop it.
    assert final is not raced and final.stop_reason != RACED and final.timings
