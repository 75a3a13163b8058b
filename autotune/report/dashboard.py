"""`autotune dashboard`: optuna-dashboard on a study's storage, with its per-trial artifacts.

The server is optuna-dashboard's WSGI app under the standard library's threaded wsgiref server
(what `optuna-dashboard` itself runs), built here rather than through `run_server` so that the
bound port is known before serving (port 0 picks a free one), requests are not logged line by
line, and Ctrl-C or a test can shut it down cleanly.
"""

from __future__ import annotations

import errno
import socket
import threading
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from autotune.errors import StudyError
from autotune.study.store.storage import artifact_dir, default_storage_url, load_study, open_storage

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

# The dashboard reads with GET only; everything else edits the study (notes, deleting a study,
# telling a trial's result, uploading artifacts).
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class _ThreadedServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a browser's open keep-alive request must not block shutdown


class _ThreadedServer6(_ThreadedServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request would drown the URL the user needs to see


def read_only(app: WSGIApp) -> WSGIApp:
    """Refuse requests that would write to the study: the storage is the tuner's record."""

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD", "GET").upper() in READ_METHODS:
            return app(environ, start_response)
        body = (
            b'{"reason": "autotune dashboard is read-only; '
            b'restart it with --allow-edits to change the study"}'
        )
        start_response(
            "403 Forbidden",
            [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
        )
        return [body]

    return guarded


@dataclass
class DashboardServer:
    """A bound, not yet serving dashboard; `serve_forever` blocks, `shutdown` stops it."""

    httpd: WSGIServer
    url: str
    study_name: str
    storage_url: str
    artifacts: str | None

    def serve_forever(self) -> None:
        try:
            self.httpd.serve_forever(poll_interval=0.2)
        finally:
            self.httpd.server_close()

    def start_in_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="autotune-dashboard", daemon=True)
        thread.start()
        return thread

    def shutdown(self) -> None:
        self.httpd.shutdown()


def _url_host(host: str) -> str:
    if host in ("", "0.0.0.0", "::"):
        return "127.0.0.1"  # a wildcard bind is reachable on loopback too
    return f"[{host}]" if ":" in host else host


def create_dashboard(
    study_name: str | None,
    storage_url: str | None,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    allow_edits: bool = False,
) -> DashboardServer:
    """Bind optuna-dashboard for an existing study; never creates a database.

    Args:
        study_name: The study to open at; None when the storage holds exactly one.
        storage_url: SQLAlchemy URL; None means the default file of `study_name`.
        host: Address to bind; loopback unless the user asks otherwise.
        port: Port to bind; 0 picks a free one.
        allow_edits: Let the browser change the study (notes, deletion, tell, uploads).

    Raises:
        StudyError: Missing study or storage, or the address cannot be bound.
    """
    from optuna.artifacts import FileSystemArtifactStore
    from optuna_dashboard import wsgi

    study = load_study(study_name, storage_url)
    url = storage_url or default_storage_url(study.study_name)
    storage = open_storage(url, create=False)
    study_id = storage.get_study_id_from_name(study.study_name)
    store_dir = artifact_dir(url, study.study_name)
    # No folder means no trial stored an artifact yet; the dashboard then says artifacts are
    # unavailable instead of us creating a folder for a read-only command.
    store = FileSystemArtifactStore(store_dir) if store_dir.is_dir() else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # optuna's ExperimentalWarning for the artifact API
        app: WSGIApp = wsgi(storage, artifact_store=store)
    if not allow_edits:
        app = read_only(app)
    try:
        server_class = _ThreadedServer6 if ":" in host else _ThreadedServer
        httpd = make_server(host, port, app, server_class=server_class, handler_class=_QuietHandler)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise StudyError(
                f"port {port} on {host} is in use; pick another with --port (0 = any free port)"
            ) from None
        raise StudyError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound_port = httpd.server_address[1]
    return DashboardServer(
        httpd=httpd,
        url=f"http://{_url_host(host)}:{bound_port}/dashboard/studies/{study_id}",
        study_name=study.study_name,
        storage_url=url,
        artifacts=str(store_dir) if store is not None else None,
    )
