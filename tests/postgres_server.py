"""A throwaway PostgreSQL server on 127.0.0.1 for storage tests (a real server, no mock)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


def _tool(name: str) -> str | None:
    for directory in BIN_DIRS:
        if (directory / name).is_file():
            return str(directory / name)
    return shutil.which(name)


def available() -> bool:
    return _tool("initdb") is not None and _tool("pg_ctl") is not None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    """Start a server in a fresh folder; yields a SQLAlchemy URL; stops and removes it after."""
    initdb, pg_ctl = _tool("initdb"), _tool("pg_ctl")
    assert initdb and pg_ctl
    # Not under pytest's tmp folder: that one is private to root, and the server cannot run
    # as root.
    tmp_path = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    data = tmp_path / "pgdata"
    data.mkdir()
    prefix: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root: use its own system user
        user = pwd.getpwnam("postgres")
        for path in (tmp_path, data):
            os.chown(path, user.pw_uid, user.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    log = tmp_path / "postgres.log"
    subprocess.run(
        [*prefix, initdb, "-D", str(data), "-A", "trust", "-U", "autotune", "--no-sync"],
        check=True,
        capture_output=True,
    )
    options = f"-p {port} -k {tmp_path} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(
        [*prefix, pg_ctl, "-D", str(data), "-o", options, "-l", str(log), "-w", "start"],
        check=True,
        capture_output=True,
    )
    try:
        subprocess.run(
            [
                *prefix,
                _tool("createdb") or "createdb",
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-U",
                "autotune",
                "autotune",
            ],
            check=True,
            capture_output=True,
        )
        yield f"postgresql+psycopg://autotune@127.0.0.1:{port}/autotune"
    finally:
        subprocess.run(
            [*prefix, pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"], capture_output=True
        )
        shutil.rmtree(tmp_path, ignore_errors=True)
