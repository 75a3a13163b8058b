"""tools/make_pool.py: a pool is built in parallel exactly as serially, only ever whole (an
error, Ctrl-C, SIGTERM or SIGKILL leaves no pool and nothing the next build keeps), and with
no font installed on the machine."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.evalset.pools import POOL_NAME

REPO = Path(__file__).resolve().parents[2]
TEST_POOLS = REPO / "tests" / "evalset" / "pools.json"
COMMITTED = json.loads(TEST_POOLS.read_text(encoding="utf-8"))


def make_pool(*args: str, pools: Path = TEST_POOLS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools.make_pool", *args, "--pools-file", str(pools)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=REPO,
    )


def folder_files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def big_pool(tmp_path: Path, items: int = 2000) -> Path:
    """A pools file naming smoke-2000: long enough to stop halfway, its hash a placeholder
    (the build would be refused at its end, which these tests never reach)."""
    pools = tmp_path / "pools.json"
    entry = {"base": "smoke", "items": items, "items_sha256": "0" * 64}
    pools.write_text(json.dumps({"smoke-2000": entry}), encoding="utf-8")
    return pools


def start_and_wait_for_half(pools: Path, out: Path) -> subprocess.Popen[str]:
    """make_pool started, returned once it says it has made half of its items."""
    command = [sys.executable, "-m", "tools.make_pool", "smoke-2000", "--pools-file", str(pools)]
    child = subprocess.Popen(
        [*command, "--out", str(out), "--workers", "2"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stderr is not None
    for line in child.stderr:
        if "(50%)" in line:
            return child
    child.wait()
    raise AssertionError(f"make_pool ended before half its items (exit {child.returncode})")


def lock_is_free(out: Path, name: str, within_s: float = 60.0) -> bool:
    """Whether the pool's lock can be taken within `within_s`: the builder and every worker
    it forked (which hold it too) are gone."""
    deadline = time.monotonic() + within_s
    with open(out / f".{name}.lock", "a", encoding="utf-8") as lock:
        while time.monotonic() < deadline:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                time.sleep(0.2)
    return False


@pytest.mark.slow
def test_a_parallel_build_is_the_serial_build_byte_for_byte(tmp_path: Path) -> None:
    """ocr-caption-200 makes items of every generated category (charts, Chinese lines,
    documents, receipts, shapes, text lines)."""
    serial = make_pool("ocr-caption-200", "--out", str(tmp_path / "serial"), "--workers", "1")
    parallel = make_pool("ocr-caption-200", "--out", str(tmp_path / "parallel"), "--workers", "2")
    assert serial.returncode == 0 and parallel.returncode == 0, serial.stderr + parallel.stderr
    a = folder_files(tmp_path / "serial" / "ocr-caption-200")
    b = folder_files(tmp_path / "parallel" / "ocr-caption-200")
    assert sorted(a) == sorted(b) and len(a) == 200 + 3  # images, items, README, build.json
    assert [name for name in a if a[name] != b[name]] == []
    records = [json.loads(line) for line in a["items.jsonl"].decode().splitlines()]
    generated = {r["category"] for r in records[164:]}
    assert generated == {"chart", "chinese", "document", "receipt", "shapes", "text_line"}
    assert "ocr-caption-200: 36 of 36 new items (100%)" in parallel.stderr
    assert (
        json.loads(parallel.stdout)["items_sha256"] == COMMITTED["ocr-caption-200"]["items_sha256"]
    )


@pytest.mark.slow
def test_a_pillow_without_raqm_draws_the_same_items(tmp_path: Path) -> None:
    """The GPU image's Pillow has no libraqm (no FriBiDi there), so Pillow lays text out its
        own BASIC way, which measures some strings a pixel apart: the pool drew other items there
        until the synth fonts pinned BASIC. Here raqm is switched off in every process of the
        build (a sitecustomize each interpreter runs): its items are the committed ones, as are
    those of a build with Pillow as installed (raqm in this venv's wheel)."""
    no_raqm = tmp_path / "no_raqm"
    no_raqm.mkdir()
    (no_raqm / "sitecustomize.py").write_text(
        "from PIL import ImageFont\nImageFont.core.HAVE_RAQM = False\n", encoding="utf-8"
    )
    env = {**os.environ, "PYTHONPATH": f"{no_raqm}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    probe = "from PIL import ImageFont; print(ImageFont.core.HAVE_RAQM)"
    assert (
        subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
        == "False"
    )
    command = [sys.executable, "-m", "tools.make_pool", "ocr-caption-200", "--pools-file"]
    hashes = {}
    for label, environment in (("as installed", dict(os.environ)), ("without raqm", env)):
        done = subprocess.run(
            [*command, str(TEST_POOLS), "--out", str(tmp_path / label), "--workers", "2"],
            env=environment,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
            cwd=REPO,
        )
        assert done.returncode == 0, done.stderr
        hashes[label] = json.loads(done.stdout)["items_sha256"]
    assert hashes == dict.fromkeys(hashes, COMMITTED["ocr-caption-200"]["items_sha256"])


@pytest.mark.slow
def test_a_build_whose_items_are_not_the_pools_files_keeps_nothing(tmp_path: Path) -> None:
    pools = tmp_path / "pools.json"
    pools.write_text(
        json.dumps({"smoke-256": {**COMMITTED["smoke-256"], "items_sha256": "a" * 64}})
    )
    done = make_pool("smoke-256", "--out", str(tmp_path / "out"), pools=pools)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].startswith(
        "make_pool: smoke-256: its items differ from the hash in the pools file (6ca589215947 vs "
        "aaaaaaaaaaaa): the generators changed"
    )
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".smoke-256.lock"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "rc", "said"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "stopped")],
    ids=["ctrl-c", "sigterm"],
)
def test_a_build_stopped_halfway_leaves_nothing(
    tmp_path: Path, sig: signal.Signals, rc: int, said: str
) -> None:
    out = tmp_path / "out"
    child = start_and_wait_for_half(big_pool(tmp_path), out)
    child.send_signal(sig)
    assert child.stderr is not None
    rest = child.stderr.read()
    assert child.wait(timeout=120) == rc, rest
    assert rest.splitlines()[-1] == f"make_pool: smoke-2000: {said}; nothing of the build was kept"
    assert "Traceback" not in rest
    assert sorted(p.name for p in out.iterdir()) == [".smoke-2000.lock"]
    assert lock_is_free(out, "smoke-2000")


@pytest.mark.slow
def test_a_killed_builds_leftover_is_no_pool_and_the_next_build_removes_it(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    child = start_and_wait_for_half(big_pool(tmp_path), out)
    child.kill()
    child.wait(timeout=60)
    assert lock_is_free(out, "smoke-2000")  # its workers died with it: none writes on
    (leftover,) = [p for p in out.iterdir() if p.is_dir()]
    assert leftover.name.startswith(".smoke-2000.building-")
    assert re.fullmatch(POOL_NAME, leftover.name) is None  # no pools file can name it
    assert (leftover / "images").is_dir() and not (leftover / "build.json").exists()
    # The next build of any pool in that folder removes it.
    done = make_pool("smoke-256", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == [
        ".smoke-2000.lock",
        ".smoke-256.lock",
        "smoke-256",
    ]


def _no_fonts_command(out: Path) -> str:
    """A shell line that hides every system font folder and matplotlib's own behind empty
    tmpfs mounts (in this mount namespace only), shows they are empty, then builds."""
    import matplotlib

    hidden = [Path(matplotlib.get_data_path()) / "fonts"]
    hidden += [Path(p) for p in ("/usr/share/fonts", "/usr/local/share/fonts") if Path(p).is_dir()]
    mounts = " && ".join(f"mount -t tmpfs none {folder}" for folder in hidden)
    listing = " ".join(str(folder) for folder in hidden)
    return (
        f"{mounts} && echo fonts left: $(find {listing} -type f | wc -l) >&2 && exec "
        f"{sys.executable} -m tools.make_pool ocr-caption-200 --pools-file {TEST_POOLS} "
        f"--out {out} --workers 2"
    )


def _unshare_works() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = ["unshare", "--mount", "--propagation", "private", "true"]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _unshare_works(), reason="needs root and unshare --mount")
def test_a_pool_of_every_category_builds_with_no_fonts_installed(tmp_path: Path) -> None:
    """As on the GPU image: no system fonts, no matplotlib fonts, a fresh matplotlib cache.
    The items are the committed ones, and the pool is, file for file, the one built where the
    fonts are installed: the shipped fonts drew both."""
    out = tmp_path / "out"
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", _no_fonts_command(out)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=REPO,
        env={**os.environ, "MPLCONFIGDIR": str(tmp_path / "mpl")},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "fonts left: 0" in done.stderr
    assert "findfont" not in done.stderr, done.stderr[-3000:]
    assert json.loads(done.stdout)["items_sha256"] == COMMITTED["ocr-caption-200"]["items_sha256"]
    with_fonts = make_pool("ocr-caption-200", "--out", str(tmp_path / "with-fonts"))
    assert with_fonts.returncode == 0, with_fonts.stderr[-3000:]
    assert folder_files(out / "ocr-caption-200") == folder_files(
        tmp_path / "with-fonts" / "ocr-caption-200"
    )
