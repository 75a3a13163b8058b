"""What Ctrl-C in the reference costs: the smoke study run straight through, against the same
study interrupted while its reference measures and then run again with the same command.

    python bench/cpu/interrupted_rerun.py --markdown OUT.md --json OUT.json

Issue 39's criterion: the rerun completes in less than twice the uninterrupted run (before,
each named candidate waited the trial time-out, 300 s in the smoke space, for a reference
queued behind it, and failed). Also checked: the rerun measures the reference first, each
named candidate it queued is measured once (the first always), and the study holds exactly
one completed reference. Exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import optuna  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

from autotune.records.stored import TrialRecord  # noqa: E402

STUDY = "rerun"
POLL_S = 0.2


def _run_command(space: str, trials: int, db: Path) -> list[str]:
    return [
        sys.executable, "-m", "autotune.cli", "run", "--space", space, "--trials", str(trials),
        "--study", STUDY, "--storage", f"sqlite:///{db}", "--quiet",
    ]  # fmt: skip


def _timed(command: list[str], cwd: Path) -> tuple[float, int, str]:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    return time.perf_counter() - started, done.returncode, done.stderr


def _reference_measuring(db: Path) -> bool:
    if not db.exists():
        return False
    try:
        study = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{db}")
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    except Exception:  # created a moment ago: not readable yet
        return False
    return any(TrialRecord.of(t).is_reference and "launch_id" in t.user_attrs for t in running)


def _interrupted(command: list[str], db: Path, cwd: Path, after_s: float) -> tuple[float, int]:
    """Run until the reference has measured `after_s` seconds, then Ctrl-C (SIGINT to the
    process group, as a terminal sends it); its wall time and exit status."""
    started = time.perf_counter()
    run = subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    while run.poll() is None and not _reference_measuring(db):
        time.sleep(POLL_S)
    time.sleep(after_s)
    if run.poll() is None:
        os.killpg(run.pid, signal.SIGINT)
    code = run.wait()
    return time.perf_counter() - started, code


def _rerun_facts(db: Path, rerun_from: int, candidates: list[str]) -> dict[str, Any]:
    study = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{db}")
    trials = study.get_trials(deepcopy=False)
    started = sorted(
        (t for t in trials if t.number >= rerun_from and t.datetime_start is not None),
        key=lambda t: t.datetime_start,  # type: ignore[arg-type, return-value]
    )
    records = {t.number: TrialRecord.of(t) for t in trials}
    measured = {
        name: [t.state.name for t in trials if records[t.number].candidate == name]
        for name in candidates
    }
    return {
        "rerun_first_trial_is_reference": bool(started) and records[started[0].number].is_reference,
        "completed_references": sum(
            1 for t in trials if records[t.number].is_reference and t.state == TrialState.COMPLETE
        ),
        "candidates": measured,
        "no_reference_failures": sum(
            1 for r in records.values() if r.failure_kind == "no-reference"
        ),
    }


def bench(space: str, trials: int, after_s: float) -> dict[str, Any]:
    from autotune.space import load_space

    candidates = [c.name for c in load_space(space).candidates]
    with tempfile.TemporaryDirectory(prefix="autotune-rerun-") as folder:
        cwd = Path(folder)
        straight_s, straight_code, straight_err = _timed(
            _run_command(space, trials, cwd / "straight.db"), cwd
        )
        db = cwd / "interrupted.db"
        command = _run_command(space, trials, db)
        first_s, first_code = _interrupted(command, db, cwd, after_s)
        rerun_from = len(optuna.load_study(study_name=STUDY, storage=f"sqlite:///{db}").trials)
        rerun_s, rerun_code, rerun_err = _timed(command, cwd)
        facts = _rerun_facts(db, rerun_from, candidates)
    checks = {
        "straight run exits 0": straight_code == 0,
        "Ctrl-C exits 130": first_code == 130,
        "rerun exits 0": rerun_code == 0,
        "rerun under twice the straight run": rerun_s < 2 * straight_s,
        "rerun measures the reference first": facts["rerun_first_trial_is_reference"],
        "one completed reference": facts["completed_references"] == 1,
        # With steps on, a run queues the first candidate before its trials and the others
        # only once a step has beaten it (autotune.study.proposals.queueing): each
        # candidate the rerun queued is measured once, and the first one always.
        "every queued named candidate measured once": all(
            states in ([], ["COMPLETE"]) for states in facts["candidates"].values()
        )
        and next(iter(facts["candidates"].values()), ["COMPLETE"]) == ["COMPLETE"],
        "no 'no completed reference' failure": facts["no_reference_failures"] == 0,
    }
    return {
        "space": space,
        "trials": trials,
        "interrupt_after_s": after_s,
        "straight_s": round(straight_s, 1),
        "interrupted_s": round(first_s, 1),
        "rerun_s": round(rerun_s, 1),
        "rerun_over_straight": round(rerun_s / straight_s, 2),
        **facts,
        "checks": checks,
        "passed": all(checks.values()),
        "stderr_tails": {"straight": straight_err[-1500:], "rerun": rerun_err[-1500:]},
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# Ctrl-C in the reference, then the same command again ({result['when']})",
        "",
        f"`autotune run --space {result['space']} --trials {result['trials']}`, run straight "
        "through, against the same study interrupted (SIGINT to the process group) "
        f"{result['interrupt_after_s']} s after its reference began measuring, then run again "
        "(`python bench/cpu/interrupted_rerun.py`). Load average at the end: "
        f"{', '.join(str(x) for x in result['load_average_at_end'])}.",
        "",
        "| run | wall time |",
        "|---|---|",
        f"| straight through | {result['straight_s']} s |",
        f"| interrupted in the reference | {result['interrupted_s']} s |",
        f"| the rerun | {result['rerun_s']} s "
        f"({result['rerun_over_straight']}x the straight run) |",
        "",
        "| check | |",
        "|---|---|",
        *(f"| {name} | {'yes' if ok else '**no**'} |" for name, ok in result["checks"].items()),
        "",
    ]
    return "\n".join(lines)


def _positive(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text}: give seconds from 0 to 3600")
    return value


def _trials(text: str) -> int:
    value = int(text)
    if not 3 <= value <= 1000:
        raise argparse.ArgumentTypeError(
            f"{text}: give 3 to 1000 (the reference and the smoke space's two candidates first)"
        )
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--space", default="smoke", help="A space with named candidates.")
    parser.add_argument("--trials", type=_trials, default=6)
    parser.add_argument(
        "--after", type=_positive, default=2.0, help="Seconds into the reference's measuring."
    )
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    result = bench(args.space, args.trials, args.after)
    page = markdown(result)
    print(page)
    if args.markdown is not None:
        args.markdown.write_text(page, encoding="utf-8")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
