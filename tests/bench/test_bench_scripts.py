"""The GPU bench scripts run on the CPU, against the bundled tiny model: a change that breaks
them fails here, not on the next GPU lease.

One tiny study, its `autotune verify`, and the grid script with fresh launches are made once;
every collector then reads them as it reads what an H200 run leaves behind.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from small_space import FIGURES_WORKLOAD, REPO, autotune_cli, run_study, small_space

from autotune.study.store.storage import open_storage

pytestmark = pytest.mark.slow

BENCH = REPO / "bench" / "gpu"


def bench(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def bench_space(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder standing for `run.sh`'s $OUT, holding the tiny space they all run."""
    out = tmp_path_factory.mktemp("out")
    # verify's tolerances and the grid's figures are compared: the longer load.
    return small_space(out, name="bench", trials=2, workload=FIGURES_WORKLOAD)


@pytest.fixture(scope="module")
def study_and_verify(bench_space: Path) -> Path:
    """The study and its `autotune verify`, in $OUT."""
    out = bench_space.parent
    result, _ = run_study(bench_space, study="bench", cwd=out)
    assert result.returncode == 0, result.stderr[-2000:]
    verify = autotune_cli(
        "verify", "--study", "bench", "--storage", f"sqlite:///{out}/bench.db", "--json",
        "--tolerance", "0.9", cwd=out,
    )  # fmt: skip
    assert verify.returncode in (0, 1), verify.stderr[-2000:]
    (out / "verify.json").write_text(verify.stdout, encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def grids(bench_space: Path) -> Path:
    """The grid script on reused launches (grid) and on fresh ones (repeat), in $OUT.

    A fixture of its own (the grid needs no study), so neither half's set-up is paid by a
    single test."""
    out = bench_space.parent
    # The GPU check of the gain launches the deploy target at its own defaults, as the study's
    # baseline trial does: here `swift deploy`, in a copy of the bench space that measures it.
    swift = yaml.safe_load((REPO / "search_spaces" / "smoke.yaml").read_text())["reference"]
    deploying = small_space(out / "defaults-space", name="defaults", reference=swift)
    runs = (
        ("grid", "1", "{}", '{"batch_size": [1, 2]}', bench_space),
        ("repeat", "2", "{}", '{"batch_size": [2]}', bench_space),
        ("defaults", "1", '{"engine_defaults": true}', '{"batch_size": [2]}', deploying),
    )
    for name, repeat, launch, request, space in runs:
        grid = bench(
            "grid.py", "--space", str(space), "--out", str(out), "--name", name,
            "--repeat", repeat, "--launch", launch, "--request", request,
            "--deadline-s", "300", "--min-launch-s", "10", cwd=out,
        )  # fmt: skip
        assert grid.returncode == 0, grid.stdout[-2000:] + grid.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def outputs(study_and_verify: Path, grids: Path) -> Path:
    """What `run.sh` leaves in $OUT, made on the CPU: a study, verify, grid, repeat."""
    return study_and_verify


def test_grid_measures_every_point_on_reused_and_fresh_launches(grids: Path) -> None:
    outputs = grids
    grid = json.loads((outputs / "grid.json").read_text())
    rows = grid["rows"]
    assert [(r["batch_size"], r["status"]) for r in rows] == [(1, "ok"), (2, "ok")]
    assert len({r["launch_id"] for r in rows}) == 1  # one launch, both points on it
    repeat = json.loads((outputs / "repeat.json").read_text())["rows"]
    assert [r["launch_number"] for r in repeat] == [1, 2]
    assert len({r["launch_id"] for r in repeat}) == 2  # each a fresh launch
    for row in rows + repeat:
        figures = row["figures"]
        assert figures["throughput_output_tokens_per_s"] > 0
        assert figures["measured_window_s"] > 0 and figures["startup_s"] > 0
        assert row["stop_reason"] in ("converged", "max_seconds", "max_requests")


def test_grid_launches_the_engine_s_defaults_as_the_study_s_baseline(grids: Path) -> None:
    """No batch cap, no KV share, the engine's own dtype: the launch the baseline trial makes."""
    (row,) = json.loads((grids / "defaults.json").read_text())["rows"]
    assert row["status"] == "ok", row
    assert row["figures"]["throughput_output_tokens_per_s"] > 0
    config = row["config"]
    assert config["engine_defaults"] is True and config["backend"] == "swift"
    assert config["max_batch_size"] is None and config["kv_cache_fraction"] is None


def test_a_launch_the_space_has_no_baseline_for_is_one_line(bench_space: Path) -> None:
    out = bench_space.parent
    result = bench(
        "grid.py", "--space", str(bench_space), "--out", str(out), "--name", "nothing",
        "--launch", '{"engine_defaults": true, "backend": "lmdeploy"}',
        "--request", '{"batch_size": [2]}', cwd=out,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error: ") and "Traceback" not in result.stderr
    assert "engine-defaults baseline" in result.stderr
    assert not (out / "nothing.json").exists()


def test_collect_study_reads_the_study_verify_repeat_and_grid(outputs: Path) -> None:
    result = bench(
        "collect_study.py", "--study", str(outputs / "bench.db"),
        "--verify", str(outputs / "verify.json"), "--repeat", str(outputs / "repeat.json"),
        "--grid", str(outputs / "grid.json"), "--candidate", "none",
        "--json", str(outputs / "study.json"), "--markdown", str(outputs / "study.md"),
        cwd=outputs,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    data = json.loads((outputs / "study.json").read_text())
    assert [run["source"] for run in data["repeat"]["runs"]] == [
        "repeat launch 1",
        "repeat launch 2",
    ]
    assert data["repeat"]["passed"] in (True, False)
    assert data["verify"]["measured"] > 0 and "covered" in data["verify"]
    assert data["grid"]["recommendation_share_of_best"] > 0
    assert data["study"]["recommended"]["trial"] in (0, 1)
    page = (outputs / "study.md").read_text()
    assert "One configuration, fresh launches" in page and "Fresh relaunch" in page


def test_launch_spread_reads_a_repeated_grid(grids: Path) -> None:
    """bench/cpu/launch_spread.py: the spread between the two fresh launches of `repeat`."""
    outputs = grids
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "cpu" / "launch_spread.py"),
         str(outputs / "repeat.json"), "--json", str(outputs / "spread.json"),
         "--markdown", str(outputs / "spread.md")],
        capture_output=True, text=True, timeout=120, cwd=outputs,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    (point,) = json.loads((outputs / "spread.json").read_text())["points"]
    figures = point["tokens_per_s"]
    assert point["point"] == {"batch_size": 2} and len(figures) == 2
    mean = sum(figures) / 2
    assert point["mean_tokens_per_s"] == pytest.approx(mean)
    # Two launches: the SD is |a - b| / sqrt(2), over the mean.
    assert point["sd_rel"] == pytest.approx(abs(figures[0] - figures[1]) / 2**0.5 / mean)
    half = point["ci_recorded_rel"]
    covered = all(abs(figures[1 - i] - figures[i]) <= half[i] * figures[i] for i in (0, 1))
    assert point["recorded_intervals_cover_each_other"] is covered
    assert "Largest spread between launches" in (outputs / "spread.md").read_text()


def copy_study(outputs: Path, storage: str, name: str) -> None:
    optuna.copy_study(
        from_study_name="bench",
        from_storage=f"sqlite:///{outputs}/bench.db",
        to_storage=open_storage(storage, create=True),
        to_study_name=name,
    )


def test_the_earlier_collectors_still_read_what_they_were_written_for(outputs: Path) -> None:
    # A resumed study and its grid: the grid and the study in one folder, verify in another.
    run_dir = outputs / "resumed"
    run_dir.mkdir()
    shutil.copy(outputs / "bench.db", run_dir / "bench.db")
    shutil.copy(outputs / "verify.json", run_dir / "verify.json")
    shutil.copy(outputs / "grid.json", run_dir / "grid.json")
    name = "cpu-resumed-study-and-grid-test"
    ten = bench(
        "collect_resumed_study_and_grid.py", "--name", name,
        "--run", f"cpu:HEAD:bench:{run_dir}:{run_dir}",
        cwd=outputs,
    )  # fmt: skip
    results = REPO / "bench" / "results"
    try:
        assert ten.returncode == 0, ten.stderr[-2000:]
        assert json.loads((results / f"{name}.json").read_text())[0]["study"] == "bench"
    finally:
        for suffix in (".json", ".tables.md"):
            (results / f"{name}{suffix}").unlink(missing_ok=True)
    # Two GPUs: three journal studies and the wall times.
    for study in ("two-gpus-1", "two-gpus-2", "tensor-parallel"):
        copy_study(outputs, str(outputs / f"{study}.journal"), study)
    (outputs / "two-gpus-walls.json").write_text('{"one_gpu_s": 10, "two_gpus_s": 6}')
    eleven = subprocess.run(
        [sys.executable, str(BENCH / "collect_two_gpus.py"), str(outputs)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert eleven.returncode == 0, eleven.stderr[-2000:]
    assert json.loads((outputs / "two-gpus.json").read_text())["ratio"] == pytest.approx(0.6)
    # FP8 and the cache: the side-by-side study and a default-space study.
    copy_study(outputs, f"sqlite:///{outputs}/fp8-and-cache.db", "fp8-and-cache")
    copy_study(outputs, f"sqlite:///{outputs}/guide-recipe.db", "guide-recipe")
    twelve = subprocess.run(
        [sys.executable, str(BENCH / "collect_fp8_and_cache.py"), str(outputs)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert twelve.returncode == 0, twelve.stderr[-2000:]
    assert "reference" in json.loads((outputs / "fp8-and-cache.json").read_text())["side_by_side"]


def test_the_gpu_shell_script_parses_and_names_every_mode() -> None:
    script = BENCH / "run.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text()
    modes = re.findall(r"^  ([a-z0-9-]+)\)", text, flags=re.MULTILINE)
    for mode in ("study", "verify", "sides", "second-study", "grid", "accuracy-through-lmdeploy"):
        assert mode in modes, mode
    # Modes say what they measure: none is named after a ticket.
    assert not [m for m in modes if re.search(r"issue|^i[0-9]", m)], modes
    # The usage line names every mode.
    assert all(m in text.split("usage:")[1] for m in modes), modes


def test_no_bench_file_is_named_after_an_issue() -> None:
    names = [p.name for p in (REPO / "bench").rglob("*") if p.is_file()]
    assert not [n for n in names if re.search(r"issue[0-9]|-i[0-9]+-", n)], names


def test_a_grid_point_of_the_candidate_first_on_its_launch_counts_as_a_fresh_launch() -> None:
    """collect_study: the grid's point with the candidate's very configuration, measured first
    on its launch, is one more fresh launch of it; a later point on that launch, another
    configuration or a failed point is not."""
    sys.path.insert(0, str(BENCH))
    try:
        import collect_study
    finally:
        sys.path.remove(str(BENCH))
    launch = {"backend": "lmdeploy", "compile_mode": "default"}
    config = {**launch, "batch_size": 64, "image_max_side": None, "do_sample": False}
    figures = {"throughput_output_tokens_per_s": 2000.0, "throughput_ci_rel": 0.06}

    def row(launch_id: str, batch_size: int, status: str = "ok", **changed: str) -> dict:
        return {"launch": {**launch, **changed}, "launch_id": launch_id, "status": status,
                "batch_size": batch_size, "image_max_side": None, "figures": figures}  # fmt: skip

    rows = [
        row("a", 64),  # first on launch a: counts
        row("a", 64),  # second on launch a: warmed by the first
        row("b", 16),  # another concurrency
        row("c", 64, compile_mode="none"),  # another launch configuration
        row("d", 64, status="failed"),
        row("e", 64),  # first on launch e: counts
    ]
    fresh = collect_study._grid_fresh_launches(rows, config)
    assert [run["source"] for run in fresh] == ["grid launch a", "grid launch e"]
    assert fresh[0]["throughput_output_tokens_per_s"] == 2000.0


def test_the_busy_cores_check_compares_recommendations_and_ranked_intervals() -> None:
    """bench/cpu/busy_cores.py's verdict: one recommendation in every run, and every ranked
    trial's interval within the bound; an infeasible or repeated trial is not ranked."""
    sys.path.insert(0, str(REPO / "bench" / "cpu"))
    from busy_cores import check, ranked

    def row(number: int, half: float, *, feasible: bool = True, repeat: bool = False) -> dict:
        return {
            "number": number,
            "state": "COMPLETE",
            "feasible": feasible,
            "duplicate_of": 0 if repeat else None,
            "throughput_ci_rel": half,
        }

    idle = {"label": "idle", "recommended_config": {"batch_size": 8}, "trials": [row(0, 0.05)]}
    busy = {
        "label": "busy",
        "recommended_config": {"batch_size": 8},
        "trials": [row(0, 0.08), row(1, 0.5, feasible=False), row(2, float("nan"), repeat=True)],
    }
    assert [r["number"] for r in ranked(busy)] == [0]
    assert check([idle, busy], 0.10) == []
    busy["trials"][0]["throughput_ci_rel"] = 0.12
    assert check([idle, busy], 0.10) == ["busy: trial 0 interval +-0.12 over 0.1"]
    busy["recommended_config"] = {"batch_size": 4}
    assert check([idle, busy], 0.5)[0].startswith("recommendations differ")


def test_collect_accuracy_through_lmdeploy_compares_with_the_reference_and_in_process_per_side(
    small_study: tuple[str, str], tmp_path: Path
) -> None:
    """bench/gpu/collect_accuracy_through_lmdeploy.py: each trial's answers against the
    reference's, and with --inprocess against the in-process engine's at the trial's own image
    side."""
    url, name = small_study
    trials = optuna.load_study(study_name=name, storage=url).trials
    side_trial = next(
        t
        for t in trials
        if t.user_attrs.get("predictions") and t.user_attrs["config"].get("image_max_side")
    )
    side = side_trial.user_attrs["config"]["image_max_side"]
    answers = dict(side_trial.user_attrs["predictions"])
    changed = sorted(answers)[0]
    inprocess = tmp_path / "inprocess"
    inprocess.mkdir()
    (inprocess / f"eval-{side}.json").write_text(
        json.dumps({"predictions": {**answers, changed: answers[changed] + " (other)"}})
    )
    out = tmp_path / "out"
    done = bench(
        "collect_accuracy_through_lmdeploy.py", "--storage", url, "--study", name,
        "--out", str(out),
        "--inprocess", str(inprocess), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {row["trial"]: row for row in json.loads((out / "through-lmdeploy.json").read_text())}
    row = rows[side_trial.number]
    assert row["inprocess_items_compared"] == len(answers)
    assert row["same_answers_as_inprocess_at_side"] == (len(answers) - 1) / len(answers)
    reference = next(r for r in rows.values() if r["same_answers_as_reference"] == 1.0)
    assert reference["items_compared"] > 0
    # A side without in-process answers compares nothing, and says so.
    others = [r for r in rows.values() if r["image_max_side"] not in (side,)]
    assert all(r["same_answers_as_inprocess_at_side"] is None for r in others)
    assert "same answers as in-process at this side" in (out / "through-lmdeploy.md").read_text()
