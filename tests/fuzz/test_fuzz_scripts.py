"""Bad input, scripts and the environment: the replay benchmark's and the tools' arguments, the
thread and fake-GPU variables, the two spellings of `launches.launch_steps`, and the on-core
clock's kernel counter, generated from a fixed seed.

Each case runs the real code path in this process: the replay's argument parser, the tools'
`main` up to where it would start working, `choose_threads`, `detect_gpus`, `load_space`, and
the engine clock fed a counter that misbehaves. A value that cannot be used ends in one line
(argparse's exit 2, or one SpaceError line); none ends in a traceback or a run that reports
nonsense. No case measures time: the clock cases count readings.
"""

from __future__ import annotations

import itertools
import math
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from small_space import REPO, small_space
from test_fuzz_stored import junk_text, unexpected

from autotune.engines import gpus
from autotune.engines.inprocess import clock as clock_module
from autotune.engines.inprocess.clock import EngineClock
from autotune.engines.threads import choose_threads
from autotune.errors import AutotuneError, SpaceError
from autotune.space import load_space
from autotune.space.settings import LaunchSettings

sys.path.insert(0, str(REPO / "bench" / "cpu"))
import replay

SEED = 7
REPLAY_CASES = 160
TOOL_CASES = 30
ENV_CASES = 150
LAUNCH_CASES = 40
CLOCK_CASES = 100

NUMBERS = ["0", "-3", "-1", "1", "2", "10", "1e3", "2.5", "nan", "inf", "-inf", "²", "٣", "",
           " 4 ", "0x10", "99999999999", "1_000", "+5", "3 4", "\x00", "-0"]  # fmt: skip


def one_line_exit(capsys: pytest.CaptureFixture[str], call: object) -> tuple[int | None, str]:
    """(exit status, stderr) of a call that parses arguments and may exit; None: no exit."""
    try:
        call()  # type: ignore[operator]
    except SystemExit as exc:
        return int(exc.code or 0), capsys.readouterr().err
    return None, capsys.readouterr().err


# --- the replay benchmark's arguments -----------------------------------------------------


def replay_argv(rng: random.Random) -> Iterator[tuple[list[str], bool]]:
    """(argv, whether the replay can use it)."""
    while True:
        option = rng.choice(
            ["--seeds", "--first-seed", "--budget-min", "--random-budget-min", "--grid-seeds",
             "--methods"]
        )  # fmt: skip
        if option == "--methods":
            names = rng.choice(
                [["study"], ["random", "study"], [""], ["bogus"], ["study", "study"],
                 ["study", ""], [junk_text(rng)], list(replay.METHODS)]
            )  # fmt: skip
            value = ",".join(names)
            good = bool(names) and all(n in replay.METHODS for n in names)
            good = good and len(set(names)) == len(names)
        else:
            budgets = ["1e9", "43200", "43201", "14400", "14401"] if "budget" in option else []
            value = rng.choice([*NUMBERS, *budgets, junk_text(rng)])
            good = _usable(option, value)
        yield [option, value], good


def _usable(option: str, value: str) -> bool:
    if option in ("--budget-min", "--random-budget-min"):
        try:
            number = float(value)
        except ValueError:
            return False
        # At most a study's longest budget; random search's default is 3x --budget-min.
        most = replay.MAX_BUDGET_MIN / (3 if option == "--budget-min" else 1)
        return math.isfinite(number) and 0 < number <= most
    text = value.strip()
    digits = text.removeprefix("-")
    if not digits.isascii() or not digits.isdigit() or len(digits) > 7:
        return False
    least = 1 if option == "--seeds" else 0
    return least <= int(text) <= 1_000_000


def test_replay_arguments_are_used_or_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rng = random.Random(SEED)
    cases = replay_argv(rng)
    failures = []
    refused = 0
    for _ in range(REPLAY_CASES):
        argv, good = next(cases)
        status, err = one_line_exit(capsys, lambda argv=argv: replay.parse_arguments(argv))
        lines = err.strip().splitlines()
        if good and status is not None:
            failures.append(f"{argv!r}: refused: {err.strip()}")
        elif not good and (status != 2 or len(lines) != 1 or "error:" not in lines[0]):
            failures.append(f"{argv!r}: exit {status}, stderr {err!r}")
        refused += status is not None
    assert not failures, f"{len(failures)} failed:\n" + "\n".join(failures[:20])
    assert refused >= REPLAY_CASES // 4 and REPLAY_CASES - refused >= REPLAY_CASES // 8, refused


def test_the_replays_methods_are_a_list_it_runs() -> None:
    args = replay.parse_arguments(["--methods", "random,study", "--random-budget-min", "5"])
    assert args.methods == ["random", "study"] and args.random_budget_min == 5.0


# --- the tools' arguments -----------------------------------------------------------------


def test_tools_refuse_a_model_that_is_not_there_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tools import make_test_lora, model_card

    rng = random.Random(SEED + 1)
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x", encoding="utf-8")
    failures = []
    for _ in range(TOOL_CASES):
        model = rng.choice(
            [str(tmp_path / "missing"), str(tmp_path / "empty"), str(tmp_path / "file"),
             "/dev/null", "", "models/nothing-here", junk_text(rng).replace("\x00", "")]
        )  # fmt: skip
        tool = rng.choice(["model_card", "make_test_lora"])
        if tool == "model_card":
            argv = [model] if not model.startswith("-") else ["--", model]
            call = lambda argv=argv: model_card.main(argv)  # noqa: E731
        else:
            argv = [str(tmp_path / "out"), f"--model={model}"]
            call = lambda argv=argv: make_test_lora.main(argv)  # noqa: E731
        try:
            status, err = one_line_exit(capsys, call)
        except Exception as exc:
            failures.append(f"{tool} {argv!r}: {unexpected(exc)}")
            continue
        lines = err.strip().splitlines()
        if status != 2 or not lines or "error:" not in lines[-1] or "Traceback" in err:
            failures.append(f"{tool} {argv!r}: exit {status}, stderr {err[-300:]!r}")
    assert not failures, f"{len(failures)} failed:\n" + "\n".join(failures[:20])


# --- environment variables ----------------------------------------------------------------


def env_value(rng: random.Random) -> str:
    return rng.choice(
        [*NUMBERS, "9999999", "64", "65", "1000000000", "NVIDIA H200@1980,NVIDIA H200",
         "a,b,,c", ",".join(["x"] * 70), "H200@²", "H200@-5", "H200@", junk_text(rng)]
    )  # fmt: skip


def test_thread_and_gpu_variables_of_any_value_end_in_a_choice_or_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(SEED + 2)
    failures = []
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # each case sets one variable alone
    for _ in range(ENV_CASES):
        variable = rng.choice(["OMP_NUM_THREADS", "AUTOTUNE_ENGINES_AT_ONCE", gpus.FAKE_GPUS_ENV])
        value = env_value(rng).replace("\x00", "")  # the environment holds no NUL
        monkeypatch.setenv(variable, value)
        try:
            if variable == gpus.FAKE_GPUS_ENV:
                found = gpus.detect_gpus()
                if len(found) > gpus.MAX_FAKE_GPUS:
                    failures.append(f"{variable}={value!r}: {len(found)} GPUs")
                if any(g.sm_clock_mhz is None or g.sm_clock_mhz <= 0 for g in found):
                    failures.append(f"{variable}={value!r}: clocks {found}")
            else:
                choice = choose_threads(None)
                text = value.strip()
                ascii_count = text.isascii() and text.isdigit() and 0 < len(text) <= 9
                expected = int(text) if ascii_count and int(text) > 0 else None
                if variable == "OMP_NUM_THREADS" and expected is not None:
                    if choice.threads != expected:
                        failures.append(f"{variable}={value!r}: {choice}")
                elif choice.threads < 1 or "OMP_NUM_THREADS=" in choice.reason:
                    failures.append(f"{variable}={value!r}: {choice}")
        except AutotuneError as exc:
            # autotune's own variables refuse what they do not take, in one line naming them
            # (autotune.variables); OMP_NUM_THREADS is OpenMP's, read as a hint.
            if "\n" in str(exc) or not str(exc).startswith(f"{variable}=") or not value.strip():
                failures.append(f"{variable}={value!r}: {exc}")
        except Exception as exc:
            failures.append(f"{variable}={value!r}: {unexpected(exc)}")
        finally:
            monkeypatch.delenv(variable)
    assert not failures, f"{len(failures)} failed:\n" + "\n".join(failures[:20])


# --- launches: the two spellings ----------------------------------------------------------


def test_launch_steps_under_either_name_or_both_is_taken_or_refused_in_one_line(
    tmp_path: Path,
) -> None:
    rng = random.Random(SEED + 3)
    failures = []
    for case in range(LAUNCH_CASES):
        values = [0, 1, 3, 5, -1, "2", None, 1.5, True]
        launches = {}
        for name in rng.sample(["launch_steps", "random_launches"], rng.randint(1, 2)):
            launches[name] = rng.choice(values)
        folder = tmp_path / f"case-{case}"
        folder.mkdir()
        path = small_space(folder, launches=launches)
        given = list(launches.values())
        # Taken: one value under either name or both, that launch_steps alone takes.
        usable = len({repr(v) for v in given}) == 1 and _launch_steps_taken(given[0])
        try:
            space = load_space(str(path))
        except SpaceError as exc:
            if usable or "\n" in str(exc) or "unknown field" in str(exc):
                failures.append(f"{launches}: {exc}")
            continue
        except Exception as exc:
            failures.append(f"{launches}: {unexpected(exc)}")
            continue
        if not usable or space.launches.launch_steps != int(given[0]):  # type: ignore[call-overload]
            failures.append(f"{launches}: taken as {space.launches.launch_steps}")
    assert not failures, f"{len(failures)} failed:\n" + "\n".join(failures[:20])


def _launch_steps_taken(value: object) -> bool:
    try:
        LaunchSettings.model_validate({"launch_steps": value})
    except ValueError:
        return False
    return True


def test_both_spellings_that_differ_name_the_one_to_keep(tmp_path: Path) -> None:
    path = small_space(tmp_path, launches={"launch_steps": 0, "random_launches": 5})
    with pytest.raises(SpaceError, match="keep launch_steps alone"):
        load_space(str(path))
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["launches"] = {"launch_steps": 0, "random_launches": 0}  # the same: taken
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert load_space(str(path)).launches.launch_steps == 0


# --- the on-core clock's counter ----------------------------------------------------------


class Counter:
    """A run-queue wait counter that misbehaves as told, from the wall clock."""

    def __init__(self, rng: random.Random) -> None:
        self.kind = rng.choice(["plausible", "faster", "backwards", "gone", "jump"])
        self.rate = rng.choice([0.0, 0.3, 0.9]) if self.kind == "plausible" else 1.5 + rng.random()
        self.start = time.perf_counter()
        self.readings = 0
        self.at = rng.randint(2, 20)  # the reading where it misbehaves (the first: its start)

    def __call__(self) -> float | None:
        self.readings += 1
        waited = self.rate * (time.perf_counter() - self.start)
        if self.kind in ("plausible", "faster"):
            return waited
        if self.readings < self.at:
            return 0.3 * (time.perf_counter() - self.start)
        if self.kind == "backwards":
            return -7.7
        if self.kind == "gone":
            return None
        return 0.3 * (time.perf_counter() - self.start) + 1000.0  # a jump ahead


def test_an_implausible_wait_counter_falls_back_to_the_wall_clock_and_the_load_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(SEED + 4)
    failures = []
    for case in range(CLOCK_CASES):
        counter = Counter(rng)
        monkeypatch.setattr(clock_module, "run_queue_wait_s", counter)
        clock = EngineClock(True, "on-core clock")
        readings = [clock.now()]
        # A load test's loop: until 2 ms of the clock passed (and the counter misbehaved, where
        # it does). Bounded: it must end well before.
        for _ in range(200_000):
            readings.append(clock.now())
            if readings[-1] - readings[0] >= 0.002 and (
                not clock.on_core or counter.readings > counter.at
            ):
                break
        else:
            failures.append(f"case {case} ({counter.kind}): the clock never advanced 2 ms")
            continue
        described = clock.describe()
        backwards = [b - a for a, b in itertools.pairwise(readings) if b < a]
        if backwards:
            failures.append(f"case {case} ({counter.kind}): went back by {min(backwards)}")
        if counter.kind == "plausible" and (not clock.on_core or len(described) != 1):
            failures.append(f"case {case}: a plausible counter rejected: {described}")
        if counter.kind != "plausible":
            if clock.on_core or "clock_fallback_reason" not in described:
                failures.append(f"case {case} ({counter.kind}): no fallback: {described}")
            elif not described["clock"].startswith("wall clock"):
                failures.append(f"case {case}: {described}")
            if clock.waited_s() < 0:
                failures.append(f"case {case} ({counter.kind}): waited {clock.waited_s()}")
    assert not failures, f"{len(failures)} failed:\n" + "\n".join(failures[:20])


def test_there_are_at_least_five_hundred_new_cases() -> None:
    from test_fuzz_repeats import CASES as REPEAT_CASES
    from test_fuzz_spool import FOLDER_CASES, PAYLOAD_CASES

    scripts = REPLAY_CASES + TOOL_CASES + ENV_CASES + LAUNCH_CASES + CLOCK_CASES
    total = scripts + FOLDER_CASES + PAYLOAD_CASES + REPEAT_CASES + REPEAT_CASES // 4 * 4
    assert total >= 500, total


# --- a NUL byte in a storage URL ----------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    ["sqlite:///qa.db%00x", "sqlite:///%00", "sqlite:///file:qa%00.db?uri=true", "s\x00.journal"],
)
def test_a_nul_byte_in_a_storage_url_is_one_line_and_leaves_no_file(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from autotune.cli import main
    from autotune.errors import StudyError
    from autotune.study.store.storage import open_storage

    monkeypatch.chdir(tmp_path)
    with pytest.raises(StudyError, match="NUL byte") as refused:
        open_storage(url, create=True)  # what `run` opens, with its clean-up of a new file
    assert "\n" not in str(refused.value)
    shown = CliRunner().invoke(main, ["best", "--storage", url])
    assert shown.exit_code == 2 and "Traceback" not in shown.output
    assert [line for line in shown.output.splitlines() if line.startswith("error:")]
    assert list(tmp_path.iterdir()) == []
