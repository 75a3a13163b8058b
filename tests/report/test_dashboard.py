"""`autotune dashboard`: optuna-dashboard on a study, read-only, stopped cleanly."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli import main
from autotune.report.dashboard import DashboardServer, create_dashboard


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def served(small_study: tuple[str, str]) -> Iterator[DashboardServer]:
    url, name = small_study
    server = create_dashboard(name, url, port=0)  # port 0: a free one
    thread = server.start_in_thread()
    yield server
    server.shutdown()
    thread.join(timeout=10)
    assert not thread.is_alive()


def base(server: DashboardServer) -> str:
    return server.url.split("/dashboard", 1)[0]


def test_lists_the_study_with_its_trials_and_artifacts(served: DashboardServer) -> None:
    assert served.url.startswith("http://127.0.0.1:")
    studies = get_json(base(served) + "/api/studies")["study_summaries"]
    assert [s["study_name"] for s in studies] == ["small"]
    study_id = studies[0]["study_id"]
    assert served.url.endswith(f"/dashboard/studies/{study_id}")
    detail = get_json(f"{base(served)}/api/studies/{study_id}")
    assert [t["number"] for t in detail["trials"]] == list(range(8))
    assert detail["objective_names"] == ["throughput_output_tokens_per_s", "e2e_latency_p95_ms"]
    assert get_json(base(served) + "/api/meta")["artifact_is_available"] is True
    names = {a["filename"] for a in detail["trials"][2]["artifacts"]}
    assert names == {"sample_outputs.json", "sample_outputs.jsonl", "accuracy_by_category.csv"}
    failed = {a["filename"] for a in detail["trials"][6]["artifacts"]}
    assert failed == {"log_tail.txt"}
    sample = next(a for a in detail["trials"][2]["artifacts"] if a["filename"].endswith(".json"))
    with urllib.request.urlopen(
        f"{base(served)}/artifacts/{study_id}/{detail['trials'][2]['trial_id']}/"
        f"{sample['artifact_id']}",
        timeout=10,
    ) as response:
        rows = json.loads(response.read())
    assert {r["id"] for r in rows} >= {"ocr-001", "cap-001"}


def test_the_browser_cannot_change_the_study(served: DashboardServer) -> None:
    request = urllib.request.Request(base(served) + "/api/studies/1", method="DELETE")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code == 403
    assert "--allow-edits" in caught.value.read().decode()
    assert get_json(base(served) + "/api/studies")["study_summaries"]


def test_busy_port_is_one_line(small_study: tuple[str, str]) -> None:
    url, _ = small_study
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(main, ["dashboard", "--storage", url, "--port", str(port)])
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"error: port {port} on 127.0.0.1 is in use; pick another with --port (0 = any free port)"
    )


def test_missing_storage_creates_no_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the default storage folder, studies/, is relative
    db = tmp_path / "missing.db"
    result = CliRunner().invoke(main, ["dashboard", "--storage", f"sqlite:///{db}", "--port", "0"])
    assert result.exit_code == 2
    assert result.output.startswith("error: no study database at")
    assert not db.exists()
    result = CliRunner().invoke(main, ["dashboard", "--port", "0"])
    assert result.exit_code == 2
    assert result.output.startswith("error: ")
    assert len(result.output.strip().splitlines()) == 1
    assert not list(tmp_path.rglob("*.db"))


@pytest.mark.slow
def test_ctrl_c_stops_cleanly(small_study: tuple[str, str]) -> None:
    url, _ = small_study
    process = subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "dashboard", "--storage", url, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline(), process.stdout.readline()]
        served_url = lines[1].split()[1]
        assert served_url.startswith("http://127.0.0.1:"), lines
        studies = get_json(served_url.split("/dashboard")[0] + "/api/studies")
        assert studies["study_summaries"][0]["study_name"] == "small"
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode in (0, 130)
    assert "Traceback" not in stderr
    assert "dashboard stopped" in stderr
