"""The README's first study shows both sides of the accuracy floor (issue 28).

`autotune run --space smoke --trials 6`, exactly as the README says, with the shipped reader:
it recommends a configuration other than the reference, with shrunk images, that answers as
well (the sequential test passed), rejects a smaller side, measured for its speed, because it
costs accuracy, and the `swift deploy` command `autotune export` prints for the recommendation
answers every smoke item as the trial did.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from small_space import autotune_cli, quick_space
from step_checks import assert_one_lever_each
from swift_replay import check_answers

from autotune.evalset.dataset import load_evalset

pytest.importorskip("openai")
pytestmark = [pytest.mark.slow, pytest.mark.swift]

TPS = "throughput_output_tokens_per_s"


def autotune(*args: str, cwd: Path) -> tuple[int, str, str]:
    done = autotune_cli(*args, cwd=cwd, timeout=1200, env={**os.environ, "COLUMNS": "200"})
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, optuna.Study, dict]:
    """The README's study, run once more (at most) when the machine's load decided it.

    The premise is that a batch of 8 measures faster than the reference's batch of 1. On
    cores that other work keeps busy its interval could widen until the two tied, and a tie
    goes to the reference (+-27.6% beside two CPU hogs on the wall clock; +-6.5% on the
    engine's on-core clock, bench/results/cpu-busy-cores-2026-12-03.md). And racing compares
    a step with the incumbent measured at another moment: in CI beside two CPU hogs, side 32
    (126 tok/s on idle cores) measured 39.9 +-33.8% while the load swung, and every smaller
    side was stopped by racing before the floor could judge it. Such a run is repeated, not
    judged; the repeat runs with racing off, so that the floor sees the smaller sides.
    """
    space = "smoke"
    for attempt in range(2):
        workdir = tmp_path_factory.mktemp(f"first-run-{attempt}")
        code, out, err = autotune("run", "--space", space, "--trials", "6", cwd=workdir)
        assert code == 0, err[-3000:]
        (workdir / "run.log").write_text(err, encoding="utf-8")
        code, out, err = autotune("best", "--json", cwd=workdir)
        assert code == 0, err[-3000:]
        best = json.loads(out)
        study = optuna.load_study(
            study_name="smoke", storage=f"sqlite:///{workdir}/studies/smoke.db"
        )
        tied = bool((best.get("recommended") or {}).get("reference")) and bool(best["ties"])
        if not tied and not _smaller_sides_only_raced(study, best):
            break
        space = str(quick_space("smoke", workdir, racing=False))
    return workdir, study, best


def _smaller_sides_only_raced(study: optuna.Study, best: dict) -> bool:
    """Whether racing stopped every trial at a smaller image side than the recommendation's
    and the floor judged none of them."""
    recommended = (best.get("recommended") or {}).get("trial")
    if recommended is None:
        return False
    side = _trial(study, recommended).user_attrs["config"].get("image_max_side") or 10**9
    smaller = [
        t
        for t in study.get_trials(deepcopy=False)
        if ((t.user_attrs.get("config") or {}).get("image_max_side") or 10**9) < side
    ]
    raced = [t for t in smaller if "raced_reason" in t.user_attrs]
    judged = [t for t in smaller if str(t.number) in best["infeasible"]]
    return bool(raced) and not judged


def _trial(study: optuna.Study, number: int) -> optuna.trial.FrozenTrial:
    return study.get_trials(deepcopy=False)[number]


def test_it_recommends_a_faster_configuration_that_answers_as_well(
    first_run: tuple[Path, optuna.Study, dict],
) -> None:
    _, study, best = first_run
    recommended = best["recommended"]
    assert best["feasible_found"] is True, best
    assert recommended["reference"] is False, best["reason"]
    trial = _trial(study, recommended["trial"])
    paired = trial.user_attrs["paired_vs_reference"]
    # The floor's test passed: the confidence sequence's low end clears the allowed drop.
    assert paired["ci_low"] > -study.user_attrs["space"]["constraints"]["accuracy"]["max_drop"]
    trials = study.get_trials(deepcopy=False)
    reference = next(t for t in trials if t.user_attrs.get("is_reference"))
    assert trial.user_attrs[TPS] > reference.user_attrs[TPS]
    assert reference.user_attrs["accuracy"] >= 0.9  # the reader reads


def test_it_recommends_shrunk_images_and_rejects_a_smaller_side_with_its_speed(
    first_run: tuple[Path, optuna.Study, dict],
) -> None:
    """Issue 38: the recommendation reads shrunk images as well as the reference reads full
    ones, and a smaller side, measured for its speed, is rejected by the floor's test."""
    _, study, best = first_run
    recommended = _trial(study, best["recommended"]["trial"])
    side = recommended.user_attrs["config"]["image_max_side"]
    assert side is not None, recommended.user_attrs["config"]
    rejected = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if str(t.number) in best["infeasible"]
        and (t.user_attrs["config"]["image_max_side"] or 10**9) < side
    ]
    assert rejected, best["infeasible"]
    for trial in rejected:
        assert trial.user_attrs[TPS] > 0  # measured, not only judged
        reasons = " ".join(best["infeasible"][str(trial.number)])
        assert "confidence sequence" in reasons, reasons
        assert "shows a drop of more than" in reasons or "undecided after" in reasons, reasons
        assert trial.user_attrs["accuracy"] < recommended.user_attrs["accuracy"]


def test_the_exported_swift_command_answers_as_the_trial_did(
    first_run: tuple[Path, optuna.Study, dict],
) -> None:
    workdir, study, best = first_run
    number = best["recommended"]["trial"]
    code, out, err = autotune("export", "--trial", str(number), "--json", cwd=workdir)
    assert code == 0, err
    export = json.loads(out)
    assert export["exact"] is True, export["notes"]
    check_answers(
        export["command"], [_trial(study, number)], {number: export}, load_evalset("smoke"), workdir
    )


def test_every_trial_was_measured_through_swift_deploy_and_each_line_says_what_ran(
    first_run: tuple[Path, optuna.Study, dict],
) -> None:
    """Issue 40: the recommendation's figure is the deployed command's, so every trial of the
    first run is measured through `swift deploy`; each progress line names its trial's source
    and what differs from the reference, and each step changed its own lever only."""
    workdir, study, _ = first_run
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        environment = trial.user_attrs["environment"]
        assert environment["runner"] == "server" and environment["server_format"] == "swift"
        assert environment["clock"].startswith("wall clock")
    lines = [
        line
        for line in (workdir / "run.log").read_text(encoding="utf-8").splitlines()
        if line.startswith("[")
    ]
    assert len(lines) >= 6, lines
    sources = (
        "(reference)", "(candidate batch-8", "(step ", "(sampler: ", "(same configuration",
        "(swift deploy's defaults",
    )  # fmt: skip
    for line in lines:
        assert any(f"] trial {n} {s}" in line for n in range(20) for s in sources), line
    first = "] trial 1 (candidate batch-8-side-256: image_max_side=256 batch_size=8)"
    assert any(first in line for line in lines), lines
    assert_one_lever_each(study)


def test_verify_relaunches_the_recommendation_on_the_same_clock(
    first_run: tuple[Path, optuna.Study, dict],
) -> None:
    """`autotune verify` on the first run, with the real `swift deploy`: it names the clock
    of each side, the same one. --tolerance 1.0: this test is about what is compared, not
    about this machine's load (bench/cpu/first_run_verify.py measures the verdicts)."""
    workdir, _, best = first_run
    code, out, err = autotune("verify", "--json", "--tolerance", "1.0", cwd=workdir)
    report = json.loads(out)
    assert code == 0 and report["passed"], (report["failure"], report["checks"], err[-2000:])
    assert report["trial"] == best["recommended"]["trial"]
    assert report["recorded_clock"] == report["measured_clock"]
    assert report["measured_clock"].startswith("wall clock")
    assert "swift deploy --model " in report["command"]


# The line `verify --client` prints before the outside tool's table.
OUTSIDE_LINE = re.compile(
    r"GuideLLM \S+ sent (\d+) requests \((\d+) measured, (\d+) errored\) at (\d+) in flight "
    r"\((\S+) at most seen\); autotune's load test sent (\d+) on this launch \((\d+) warm-up\)"
    r" at (\d+) in flight"
)


def test_verify_with_guidellm_prints_its_figure_beside_autotune_s(
    first_run: tuple[Path, optuna.Study, dict],
) -> None:
    """Issue 54: `autotune verify --client guidellm` on the first run, with the real tool and
    the real `swift deploy`: GuideLLM measures the relaunch with as many requests as autotune's
    load test sent, at the recommendation's concurrency, and both figures print side by side.
    --tolerance 1.0: this is about what the tool is given and prints, not this machine's load."""
    pytest.importorskip("guidellm")
    workdir, study, best = first_run
    batch = _trial(study, best["recommended"]["trial"]).user_attrs["config"]["batch_size"]
    code, out, err = autotune("verify", "--tolerance", "1.0", "--client", "guidellm", cwd=workdir)
    said = OUTSIDE_LINE.search(out)
    assert said, out + err[-2000:]
    sent, measured, errored, streams, seen, ours, warmup, our_streams = said.groups()
    # As many requests as autotune's load test sent; which of them its warm-up covers is
    # GuideLLM's own rule (it was told how many), so its measured ones are only bounded.
    assert int(sent) == int(ours) > int(warmup) and 0 < int(measured) < int(sent)
    assert int(errored) == 0
    assert int(streams) == int(our_streams) == batch and float(seen) == batch
    # The outside table follows its line (verify's own table, above it, has the same rows).
    row = next(line for line in out[said.end() :].splitlines() if line.startswith(f"│ {TPS}"))
    recorded, measured_here, outside, ratio = [cell.strip() for cell in row.split("│")[2:6]]
    assert float(recorded) > 0 and float(measured_here) > 0 and float(outside) > 0, row
    assert ratio == f"{float(outside) / float(measured_here):.2f}x"
    # The verdict stays verify's own: the outside figure is shown, not judged.
    assert code == (0 if "\nPASS\n" in out else 1), out
