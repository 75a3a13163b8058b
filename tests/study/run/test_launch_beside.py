"""The next launch started beside the reference (LaunchScheduler.session_for(..., then=)):
taken over by the trial that needs it, closed when another trial comes next or the study
stops, and timed to the moment it answered (autotune.engines.server.ServerSession.begin).
Fake engines with a fake clock for the scheduler; a real server process for the server's."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import optuna
import pytest
from fake_server import PROMPTS, fake, leftovers, space, token

from autotune.engines import measure_plan
from autotune.engines.server import ServerSession
from autotune.engines.server_launch import ServerLaunch
from autotune.evalset.dataset import load_evalset
from autotune.params import TrialConfig
from autotune.records.stored import MEASURED_BESIDE, STARTUP_BESIDE
from autotune.space import load_space
from autotune.study.plan import StudyPlan
from autotune.study.results.progress import time_line
from autotune.study.run.launches import LaunchScheduler
from autotune.study.run.runtime import Runtime

REPO = Path(__file__).resolve().parents[3]
REFERENCE = TrialConfig(backend="transformers", batch_size=1)
GRAPHS = TrialConfig(backend="lmdeploy", compile_mode="default", kv_cache_fraction=0.3)
EAGER = TrialConfig(backend="lmdeploy", compile_mode="none", kv_cache_fraction=0.3)
STARTUP_S = {"transformers": 15.0, "lmdeploy": 60.0}  # each launch's, on the fake clock


class FakeWorld:
    """A clock that launches advance, and every launch it started or opened."""

    def __init__(self) -> None:
        self.now = 0.0
        self.opened: list[FakeLaunch] = []

    def runtime(self) -> Runtime:
        return Runtime(clock=lambda: self.now, open_session=self.open, begin_session=self.begin)

    def open(self, space: Any, launch: TrialConfig, **_: Any) -> FakeLaunch:
        return FakeLaunch(self, launch).start()

    def begin(self, space: Any, launch: TrialConfig, **_: Any) -> FakeLaunch:
        return FakeLaunch(self, launch)


class FakeLaunch:
    def __init__(self, world: FakeWorld, launch: TrialConfig) -> None:
        self.world = world
        self.launch_key = launch.launch_key()
        self.launch_id = f"fake-{len(world.opened) + 1}"
        self.startup_s = STARTUP_S[launch.backend]
        self.ready_at = world.now + self.startup_s
        self.closed = False
        world.opened.append(self)

    def start(self, *, on_phase: Any = None) -> FakeLaunch:
        self.world.now = max(self.world.now, self.ready_at)
        return self

    def alive(self) -> bool:
        return not self.closed

    def close(self) -> None:
        self.closed = True


def scheduler(world: FakeWorld, *, device: str = "cuda") -> LaunchScheduler:
    default = load_space("default")
    plan = StudyPlan(
        space=default.model_copy(update={"device": device}),
        model="Qwen/Qwen3-VL-2B-Instruct",
        model_path="unused",
        evalset=load_evalset(REPO / "evalsets" / "ocr-caption"),
        study_name="beside",
        storage_url="sqlite://",
        dummy_weights=True,
    )
    return LaunchScheduler(plan, runtime=world.runtime())


def test_the_next_launch_starts_beside_the_reference_and_its_trial_waits_only_for_the_rest():
    world = FakeWorld()
    launches = scheduler(world)
    reference, started = launches.session_for(REFERENCE, None, then=GRAPHS)
    assert started and launches.beside_next and world.now == 15.0  # the reference is up
    assert launches.startup_wait_s == 15.0
    world.now += 30.0  # the reference measures while the next server starts
    session, started = launches.session_for(GRAPHS, None)
    assert started and launches.started_beside and session is world.opened[0]
    assert reference.closed and not session.closed
    assert launches.startup_wait_s == 60.0 - 45.0  # what was left of its start-up
    assert session.startup_s == 60.0  # its own start-up stays known
    assert not launches.beside_next  # nothing started beside this one
    launches.close()
    assert all(launch.closed for launch in world.opened)


@pytest.mark.parametrize(("window", "hidden"), [((40.0, 52.0), 12.0), ((50.0, 70.0), 10.0)])
def test_the_reference_s_accuracy_pass_is_timed_against_the_start_up_beside_it(
    window: tuple[float, float], hidden: float
) -> None:
    world = FakeWorld()
    launches = scheduler(world)
    launches.session_for(REFERENCE, None, then=GRAPHS)  # the next began at 0, answers at 60
    launches.accuracy_beside(*window)  # the reference's accuracy pass, on the same clock
    world.now = window[1]
    launches.session_for(GRAPHS, None)
    assert launches.started_beside
    # The part of the pass that ran while the next launch was still starting: all of a
    # pass that ended before it answered, none of what came after.
    assert launches.accuracy_overlap_s == (hidden, window[1] - window[0])
    launches.session_for(EAGER, None)  # a launch that started alone hid nothing
    assert launches.accuracy_overlap_s is None


def test_a_launch_started_for_a_trial_that_did_not_come_next_is_closed_unused():
    world = FakeWorld()
    launches = scheduler(world)
    launches.session_for(REFERENCE, None, then=GRAPHS)
    session, _ = launches.session_for(EAGER, None)
    beside = world.opened[0]
    assert beside.closed and session is world.opened[2] and not launches.started_beside
    assert launches.startup_wait_s == 60.0


def test_stopping_the_study_stops_a_launch_still_starting_beside():
    world = FakeWorld()
    launches = scheduler(world)
    launches.session_for(REFERENCE, None, then=GRAPHS)
    launches.close()  # Ctrl-C, the budget, the last trial: what autotune run does at its end
    assert [launch.closed for launch in world.opened] == [True, True]


def test_nothing_starts_beside_on_a_cpu_or_for_an_engine_sized_by_total_memory():
    world = FakeWorld()
    scheduler(world, device="cpu").session_for(REFERENCE, None, then=GRAPHS)
    scheduler(world).session_for(REFERENCE, None, then=TrialConfig(backend="vllm"))
    same = scheduler(world)
    same.session_for(REFERENCE, None, then=REFERENCE)  # the launch it starts already
    assert [launch.launch_key for launch in world.opened] == [REFERENCE.launch_key()] * 3
    assert not same.beside_next


@pytest.mark.slow
def test_a_server_begun_beside_other_work_is_timed_to_when_it_answered() -> None:
    tag, ports = token(), []
    render = fake(tag, "--startup-delay", "0.3")

    def recorded(_config: TrialConfig, port: int | None) -> Any:
        ports.append(port)
        return render(port or 0)

    quick = space()
    config = TrialConfig(batch_size=1, max_new_tokens=8)
    server_launch = ServerLaunch(
        render=recorded, launch=config, fmt="swift", device="cpu", startup_timeout_s=60.0
    )
    session = ServerSession(server_launch, prompts=PROMPTS, trial_timeout_s=60.0)
    begun = time.perf_counter()
    session.begin()
    try:
        while not _answers(ports[-1]):  # the caller's other work, until the server is up
            time.sleep(0.1)
        time.sleep(2.0)
        called = time.perf_counter() - begun
        session.start()
        # Its start-up ended when it first answered, not when start() was called.
        assert 0.3 <= session.startup_s <= called - 1.0, (session.startup_s, called)
        result = session.measure(config, measure_plan(quick, config, accuracy_ids=None))
        assert result.timings
    finally:
        session.close()
    assert not leftovers(tag)


def test_a_server_begun_and_closed_while_starting_leaves_nothing_running() -> None:
    tag = token()
    render = fake(tag, "--startup-delay", "60")
    server_launch = ServerLaunch(
        render=lambda _config, port: render(port or 0),
        launch=TrialConfig(),
        fmt="swift",
        device="cpu",
        startup_timeout_s=120.0,
    )
    session = ServerSession(server_launch, prompts=PROMPTS, trial_timeout_s=60.0)
    session.begin()
    while not leftovers(tag):  # the server process is up, still starting
        time.sleep(0.05)
    session.close()
    assert not leftovers(tag)
    watchers = [thread for thread in threading.enumerate() if thread.name == "server-ready"]
    assert not watchers  # its watcher ended with it


def _answers(port: int | None) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_progress_lines_say_which_launch_started_beside_which() -> None:
    def trial(number: int, **attrs: Any) -> optuna.trial.FrozenTrial:
        return optuna.trial.create_trial(
            value=1.0, user_attrs={"launch_id": f"x-{number + 1}", "launch_started": True, **attrs}
        )

    reference = trial(0, environment={MEASURED_BESIDE: "the next launch (lmdeploy) starting up"})
    candidate = trial(1, environment={STARTUP_BESIDE: "started while the reference measured"})
    assert "measured beside the next launch (lmdeploy) starting up" in time_line(reference)
    assert "new launch x-2, started beside the reference" in time_line(candidate)
    assert "beside" not in time_line(trial(2, environment={}))
