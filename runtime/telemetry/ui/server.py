"""gkr-ui's HTTP server: one static page and the JSON it reads, on the standard library's
threading HTTP server.

The store is opened for each request and closed after it: chDB lets one process hold a folder
at a time (reference/telemetry.md §4), and a run writing its telemetry must be able to take it.
While a run holds it, store requests answer 503 with the reason and a Retry-After; the page
shows the reason and asks again. One lock serialises this process's store requests.

Every answer is JSON or one of the page's own files; the page builds its DOM from text nodes,
and its Content-Security-Policy lets it load nothing but this server's files.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from runtime.errors import Category, RuntimeFailure
from runtime.telemetry.store import Store, StoreBusy, describe
from runtime.telemetry.stragglers import DEFAULT_WINDOW_S
from runtime.telemetry.ui import DEFAULT_PORT, data, live

log = logging.getLogger(__name__)
RETRY_AFTER_S = 5
MAX_WINDOW_S = 86_400
STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".css": "text/css; charset=utf-8"}
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# Only this server's own files, no inline code (the page has none), no framing.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


class UiError(RuntimeFailure):
    """gkr-ui cannot serve: the address is taken or not this machine's."""

    category = Category.INVALID_INPUT


class BadRequest(RuntimeFailure):
    """A request's parameter is malformed (answered 400)."""

    category = Category.INVALID_INPUT


@dataclass(frozen=True)
class UiConfig:
    """What `gkr ui` serves, and where."""

    dsn: str  # the telemetry store (chdb:///folder or http(s)://host:8123/db)
    host: str = "127.0.0.1"  # the address to listen on: this machine only, by default
    port: int = DEFAULT_PORT  # 0 picks a free port
    reach: live.Reach = field(default_factory=live.Reach)  # the cluster and Warden to ask


@dataclass(frozen=True)
class Reply:
    """One HTTP answer."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)


class App:
    """The routes, apart from the socket: `handle(path)` gives the reply to a GET."""

    def __init__(self, config: UiConfig) -> None:
        self.config = config
        self._store_lock = threading.Lock()
        self._migrated = False

    def handle(self, target: str) -> Reply:
        """The answer to `GET target`; a library failure is a JSON error with its status."""
        parts = urlsplit(target)
        segments = [unquote(s) for s in parts.path.split("/")[1:]]  # split first: runs hold "/"
        try:
            return self._route(segments, parse_qs(parts.query))
        except StoreBusy as error:
            return _error(HTTPStatus.SERVICE_UNAVAILABLE, error, busy=True,
                          headers={"Retry-After": str(RETRY_AFTER_S)})
        except (data.UnknownRun, BadRequest) as error:
            status = HTTPStatus.NOT_FOUND if isinstance(error, data.UnknownRun) else \
                HTTPStatus.BAD_REQUEST
            return _error(status, error)
        except RuntimeFailure as error:  # a failed query, an unreachable server: said, not raised
            log.warning("gkr ui: %s: %s", parts.path, error)
            return _error(HTTPStatus.INTERNAL_SERVER_ERROR, error)

    def _route(self, path: list[str], query: dict[str, list[str]]) -> Reply:
        match path:
            case [""]:
                return _static("index.html")
            case ["static", name]:
                return _static(name)
            case ["favicon.ico"]:  # browsers ask for it unprompted; there is none
                return Reply(HTTPStatus.NO_CONTENT, b"")
            case ["api", "runs"]:
                return self._read(lambda store: {"runs": data.runs(store)})
            case ["api", "runs", run]:
                return self._read(lambda store: data.run_page(store, run))
            case ["api", "runs", run, "stragglers"]:
                window = _window(query)
                return self._read(lambda store: data.straggler_view(store, run, window))
            case ["api", "events"]:
                return self._read(lambda store: {"events": data.events(store)})
            case ["api", "cluster"]:
                return _json(live.cluster(self.config.reach))
            case ["api", "warden"]:
                return _json(live.warden(self.config.reach))
        return _error(HTTPStatus.NOT_FOUND, "no such page")

    def _read(self, read: Callable[[Store], dict[str, Any]]) -> Reply:
        with self._store() as store:
            return _json({"store": describe(store.dsn), **read(store)})

    @contextmanager
    def _store(self) -> Iterator[Store]:
        """The store for one request, closed after it (see the module's docstring). The
        schema is brought up to date once, so an empty store reads as one without runs."""
        with self._store_lock:
            store = Store.connect(self.config.dsn, migrate=not self._migrated)
            self._migrated = True
            try:
                yield store
            finally:
                store.close()


def _window(query: dict[str, list[str]]) -> int:
    text = query.get("window", [str(DEFAULT_WINDOW_S)])[-1]
    window = int(text) if text.isdigit() else 0
    if not 1 <= window <= MAX_WINDOW_S:
        raise BadRequest(f"window={text!r}: a whole number of seconds from 1 to {MAX_WINDOW_S}")
    return window


def _static(name: str) -> Reply:
    """A file of `static/`: only plain names of the types it holds (no path reaches out)."""
    folder = resources.files("runtime.telemetry.ui") / "static"
    suffix = name[name.rfind("."):] if "." in name else ""
    entry = folder / name
    if suffix not in STATIC_TYPES or "/" in name or "\\" in name or not entry.is_file():
        return _error(HTTPStatus.NOT_FOUND, "no such page")
    headers = {"Content-Security-Policy": CSP} if suffix == ".html" else {}
    return Reply(HTTPStatus.OK, entry.read_bytes(), STATIC_TYPES[suffix], headers)


def _json(value: Any, status: int = HTTPStatus.OK,
          headers: Mapping[str, str] | None = None) -> Reply:
    body = json.dumps(plain(value), allow_nan=False, separators=(",", ":")).encode()
    return Reply(status, body, "application/json", headers or {})


def _error(status: int, error: Exception | str, busy: bool = False,
           headers: Mapping[str, str] | None = None) -> Reply:
    return _json({"error": str(error), "busy": busy}, status, headers)


def plain(value: Any) -> Any:
    """JSON-ready data: times in RFC 3339 (UTC), NaN and infinities as null (JSON has none)."""
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
        return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value if value is None or isinstance(value, bool | int | str) else str(value)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if not self.server.host_allowed(self.headers.get("Host", "")):
            reply = _error(HTTPStatus.MISDIRECTED_REQUEST, "unexpected Host header")
        else:
            try:
                reply = self.server.app.handle(self.path)
            except Exception as error:  # a bug: answered (the page shows it) and logged
                log.exception("gkr ui: GET %s", self.path)
                reply = _error(HTTPStatus.INTERNAL_SERVER_ERROR, f"gkr ui failed: {error!r}")
        self.send_response(reply.status)
        for name, value in {"Content-Type": reply.content_type,
                            "Content-Length": str(len(reply.body)), "Cache-Control": "no-store",
                            "X-Content-Type-Options": "nosniff",
                            "Referrer-Policy": "no-referrer", **reply.headers}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(reply.body)

    def log_message(self, format: str, *args: Any) -> None:  # the base's signature
        log.debug("gkr ui: " + format, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # Ctrl-C must not wait for a browser's open connections

    def __init__(self, config: UiConfig) -> None:
        self.app = App(config)
        super().__init__((config.host, config.port), _Handler)

    def host_allowed(self, host: str) -> bool:
        """On loopback, only requests addressed to loopback: a web page elsewhere cannot read
        this server through a name it re-points at 127.0.0.1 (DNS rebinding)."""
        if self.app.config.host not in LOOPBACK:
            return True
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return name.strip("[]") in LOOPBACK


def serve(config: UiConfig, ready: Callable[[str], None]) -> None:
    """Serve until interrupted (KeyboardInterrupt leaves through here, the socket closed);
    `ready` gets the page's URL once the port is open."""
    try:
        server = _Server(config)
    except OSError as error:
        raise UiError(f"cannot listen on {config.host}:{config.port}: {error.strerror or error}; "
                      "pick another --port (0: any free port) or --host") from error
    with server:
        host, port = str(server.server_address[0]), server.server_address[1]
        ready(f"http://{f'[{host}]' if ':' in host else host}:{port}/")
        server.serve_forever()


__all__ = ["DEFAULT_PORT", "App", "Reply", "UiConfig", "UiError", "plain", "serve"]
