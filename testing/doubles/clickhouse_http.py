"""A TEST DOUBLE of a ClickHouse server's HTTP interface: no ClickHouse server can be installed
on these machines (Debian's package is from 2018), and the cluster path of the telemetry store
(`http://user:password@host:8123/database`) must still be tested end to end.

It is a real HTTP server on loopback (a thread of the test process, a random port) that the
real client, clickhouse-connect 1.12, reaches over real HTTP. Every statement runs in chDB,
ClickHouse's own engine inside this process (`chdb.session.Session(folder)`), so the SQL, the
Native format it reads and writes, and the error texts are ClickHouse's; this module adds only
what the server's HTTP layer adds (https://clickhouse.com/docs/interfaces/http and
ClickHouse/ClickHouse `src/Server/HTTPHandler.cpp`):

* the statement from the `query` URL parameter followed by the body, or from the body alone;
  POST and GET; `GET /` and `GET /ping` answer `Ok.`;
* `INSERT INTO t [(cols)] FORMAT F` followed by data in F (clickhouse-connect sends Native),
  the data in the body after the statement or, with the statement in the URL, the whole body;
  request bodies with `Content-Length` or chunked (clickhouse-connect streams its inserts);
* a query's output in the format of its `FORMAT` clause, TabSeparated without one;
  `X-ClickHouse-Format`, `-Query-Id` (the `query_id` parameter, else a new UUID),
  `-Timezone`, `-Summary` (read/written rows and bytes, elapsed ns);
* users and passwords: HTTP Basic auth, `X-ClickHouse-User`/`X-ClickHouse-Key` headers, or
  `user`/`password` parameters, `default` with no password when none is given; a wrong
  user or password is refused as ClickHouse does (403, code 516 AUTHENTICATION_FAILED);
* `readonly`, from a user's profile (`readonly_users`) or a request's parameter, as the server
  holds it: the profile's level is set before the request's settings, so that a read-only
  user's change of any setting fails with the engine's own Code 164 READONLY (HTTP 500:
  READONLY is not among exceptionCodeToHTTPStatus.cpp's codes), and the request's `readonly`
  last, as it applies to that request only. Such a request runs on a chDB session of its own
  (closed after it), since a session once read-only cannot be made writable again; the
  refusals are therefore chDB's, i.e. ClickHouse's, not this module's;
* `database` (the current database; 404 UNKNOWN_DATABASE when absent), `param_<name>` (query
  parameters), and any other parameter as a setting of that one query (an unknown one fails
  as on the server, 404 UNKNOWN_SETTING);
* compression: request bodies in `Content-Encoding` lz4 (frame), zstd, br, gzip or deflate;
  responses compressed when `enable_http_compression` is on (the parameter, else the
  engine's default) and `Accept-Encoding` names a method,
  chosen in the server's order (zstd, br, lz4, gzip, deflate: `chooseHTTPCompressionMethod`
  in `src/IO/CompressionMethod.cpp`);
* errors: the exception text as ClickHouse sends it (`Code: N. DB::Exception: … (NAME)
  (version V)`), `X-ClickHouse-Exception-Code: N`, and the HTTP status the server gives that
  error (`src/Server/HTTP/exceptionCodeToHTTPStatus.cpp`: 400 for syntax and parse errors,
  403 for authentication, 404 for unknown tables, databases, functions, settings, 500 else).

Where it differs from a server (the tests rely on none of these being real):
* `session_id` is accepted but every session shares one chDB session: `SET` and temporary
  tables are not kept per HTTP session; statements run one at a time;
* multipart form bodies (clickhouse-connect's `form_encode_query_params`, external data) and
  the native `compress=1` block compression are refused with 501 NOT_IMPLEMENTED;
* progress headers (`send_progress_in_http_headers`) are never sent: the whole answer is
  computed before it is written;
* no access control beyond passwords and profiles' `readonly` (chDB has no users or grants):
  a user's GRANTs (generator/platform/telemetry.py) are not modelled, nor GET's implied
  read-only mode.

chDB holds one database folder per process: close every other chDB store of the test process
before starting this server, and stop the server before opening another.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import threading
import uuid
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

DEFAULT_USER = "default"
# Parameters the HTTP layer reads itself; every other one is a setting of the query.
TRANSPORT = frozenset({
    "query", "database", "session_id", "session_timeout", "session_check", "query_id",
    "user", "password", "quota_key", "default_format", "client_protocol_version",
    "buffer_size", "wait_end_of_query", "decompress", "role",
})
_INSERT = re.compile(rb"^\s*(INSERT\s+INTO\s+.+?)\s+FORMAT\s+(\w+)[ \t]*\r?\n?", re.I | re.S)
_FORMAT = re.compile(r"\bFORMAT\s+(\w+)\s*;?\s*$", re.I)
_CODE = re.compile(r"Code: (\d+)\.")
_NAME = re.compile(r"\(([A-Z][A-Z0-9_]+)\)\s*$")
# exceptionCodeToHTTPStatus.cpp, by the error's name (the text ends with it).
_STATUS = {
    **dict.fromkeys((
        "BAD_ARGUMENTS", "CANNOT_COMPILE_REGEXP", "CANNOT_PARSE_TEXT",
        "CANNOT_PARSE_ESCAPE_SEQUENCE", "CANNOT_PARSE_QUOTED_STRING", "CANNOT_PARSE_DATE",
        "CANNOT_PARSE_DATETIME", "CANNOT_PARSE_NUMBER", "CANNOT_PARSE_DOMAIN_VALUE_FROM_STRING",
        "CANNOT_PARSE_IPV4", "CANNOT_PARSE_IPV6", "CANNOT_PARSE_INPUT_ASSERTION_FAILED",
        "CANNOT_PARSE_UUID", "DUPLICATE_COLUMN", "ILLEGAL_COLUMN", "UNKNOWN_ELEMENT_IN_AST",
        "UNKNOWN_TYPE_OF_AST_NODE", "THERE_IS_NO_COLUMN", "TOO_DEEP_AST", "TOO_BIG_AST",
        "UNEXPECTED_AST_STRUCTURE", "SYNTAX_ERROR", "INCORRECT_DATA", "TYPE_MISMATCH",
        "VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE"), 400),
    **dict.fromkeys(("REQUIRED_PASSWORD",), 401),
    **dict.fromkeys(("UNKNOWN_USER", "WRONG_PASSWORD", "AUTHENTICATION_FAILED",
                     "SET_NON_GRANTED_ROLE", "ACCESS_DENIED"), 403),
    **dict.fromkeys((
        "UNKNOWN_TABLE", "UNKNOWN_FUNCTION", "UNKNOWN_IDENTIFIER", "UNKNOWN_TYPE",
        "UNKNOWN_STORAGE", "UNKNOWN_DATABASE", "UNKNOWN_SETTING",
        "UNKNOWN_DIRECTION_OF_SORTING", "UNKNOWN_AGGREGATE_FUNCTION", "UNKNOWN_FORMAT",
        "UNKNOWN_DATABASE_ENGINE", "UNKNOWN_TYPE_OF_QUERY", "UNKNOWN_ROLE"), 404),
    "QUERY_IS_TOO_LARGE": 413, "NOT_IMPLEMENTED": 501, "SOCKET_TIMEOUT": 503,
    "CANNOT_OPEN_FILE": 503, "TIMEOUT_EXCEEDED": 408, "CANNOT_SCHEDULE_TASK": 503,
}
_CONTENT_TYPES = {"Native": "application/octet-stream", "RowBinary": "application/octet-stream",
                  "JSON": "application/json; charset=UTF-8",
                  "JSONEachRow": "application/x-ndjson; charset=UTF-8"}


class ServerError(Exception):
    """A ClickHouse exception as the server reports it: its code, name and text."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        code, name = _CODE.search(text), _NAME.search(text)
        self.code = int(code.group(1)) if code else 1000
        self.name = name.group(1) if name else ""

    @property
    def status(self) -> int:
        return _STATUS.get(self.name, 500)


@dataclass
class Answer:
    """What one request gets back."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Call:
    """One request as received (the tests look at what the client sent)."""

    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    body: bytes  # decompressed


def _lz4_decompress(data: bytes) -> bytes:
    import lz4.frame  # clickhouse-connect's own dependency for lz4

    return bytes(lz4.frame.decompress(data))


def _lz4_compress(data: bytes) -> bytes:
    import lz4.frame

    return bytes(lz4.frame.compress(data))


def _zstd() -> Any:
    from backports import zstd  # clickhouse-connect's zstd on Python < 3.14

    return zstd


def _brotli() -> Any:
    import brotli  # optional in clickhouse-connect; offered only when installed

    return brotli


DECOMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "lz4": _lz4_decompress, "zstd": lambda d: bytes(_zstd().decompress(d)),
    "br": lambda d: bytes(_brotli().decompress(d)), "gzip": gzip.decompress,
    "deflate": zlib.decompress,
}
COMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "zstd": lambda d: bytes(_zstd().compress(d)), "br": lambda d: bytes(_brotli().compress(d)),
    "lz4": _lz4_compress, "gzip": gzip.compress, "deflate": zlib.compress,
}


def response_encoding(accept: str) -> str | None:
    """The server's choice among the client's methods (chooseHTTPCompressionMethod's order)."""
    offered = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    return next((method for method in COMPRESS if method in offered), None)


class Engine:
    """chDB behind a lock: one statement at a time, each in its request's database and
    settings."""

    def __init__(self, folder: Path) -> None:
        from chdb import session

        self.folder = folder
        self.lock = threading.Lock()
        self.session = session.Session(str(folder))
        first = self.session.query("SELECT version(), timezone()", "TabSeparated")
        self.version, self.timezone = first.bytes().decode().strip().split("\t")
        compression = self.session.query("SELECT getSetting('enable_http_compression')",
                                         "TabSeparated")
        self.compresses = compression.bytes().decode().strip() in ("1", "true")  # the default
        self.settings: dict[str, str] = {}  # settings the last request set, to undo

    def close(self) -> None:
        self.session.close()

    def run(self, statement: bytes, data: bytes | None, database: str,
            settings: Mapping[str, str], params: Mapping[str, str],
            readonly: int = 0) -> tuple[bytes, dict[str, str]]:
        """Run one statement; its output and the summary header's figures. `readonly`: the
        user's profile's level."""
        with self.lock:
            if readonly or "readonly" in settings:
                return self._read_only(statement, data, database, settings, params, readonly)
            self._prepare(database, settings)
            return self._statement(self.session, statement, data, params)

    def _statement(self, session: Any, statement: bytes, data: bytes | None,
                   params: Mapping[str, str]) -> tuple[bytes, dict[str, str]]:
        if data is not None:
            return self._insert(session, statement, data)
        return self._query(session, statement.decode(), params)

    def _read_only(self, statement: bytes, data: bytes | None, database: str,
                   settings: Mapping[str, str], params: Mapping[str, str],
                   profile: int) -> tuple[bytes, dict[str, str]]:
        """One request on a session of its own: the profile's readonly, then the request's
        settings, its readonly last (HTTPHandler checks them all against the profile)."""
        from chdb import session as chdb_session

        session = chdb_session.Session(str(self.folder))
        try:
            if profile:
                _call(session, f"SET readonly = {profile}")
            for name, value in settings.items():
                if name != "readonly":
                    _call(session, f"SET {name} = {_literal(value)}")
            if "readonly" in settings:
                _call(session, f"SET readonly = {_literal(settings['readonly'])}")
            _call(session, f"USE {_identifier(database)}")
            return self._statement(session, statement, data, params)
        finally:
            session.close()

    def _prepare(self, database: str, settings: Mapping[str, str]) -> None:
        for name in set(self.settings) - set(settings):
            self._call(f"SET {name} = DEFAULT")
        self.settings = {}
        for name, value in settings.items():
            self._call(f"SET {name} = {_literal(value)}")
            self.settings[name] = value
        self._call(f"USE {_identifier(database)}")

    def _insert(self, session: Any, statement: bytes,
                data: bytes) -> tuple[bytes, dict[str, str]]:
        match = _INSERT.match(statement)
        assert match is not None  # the caller split it with the same pattern
        try:
            inserter = session.send_insert(match.group(1).decode(), match.group(2).decode())
            inserter.append(data)
            result = inserter.finish()
        except Exception as error:  # chDB raises RuntimeError with ClickHouse's text
            raise ServerError(_exception_text(error)) from error
        return b"", _summary(0, 0, result.rows_written, result.bytes_written, result.elapsed)

    def _query(self, session: Any, sql: str,
               params: Mapping[str, str]) -> tuple[bytes, dict[str, str]]:
        result = _call(session, sql, params)
        return result.bytes(), _summary(result.rows_read(), result.bytes_read(),
                                        result.rows_written(), result.bytes_written(),
                                        result.elapsed())

    def _call(self, sql: str) -> Any:
        return _call(self.session, sql)


def _call(session: Any, sql: str, params: Mapping[str, str] | None = None) -> Any:
    try:
        return session.query(sql, "TabSeparated", params=dict(params or {}))
    except Exception as error:
        raise ServerError(_exception_text(error)) from error


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _identifier(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _exception_text(error: Exception) -> str:
    text = str(error)
    start = text.find("Code: ")
    return text[start:] if start >= 0 else f"Code: 1000. DB::Exception: {text}. (STD_EXCEPTION)"


def _summary(read_rows: int, read_bytes: int, written_rows: int, written_bytes: int,
             elapsed_s: float) -> dict[str, str]:
    """X-ClickHouse-Summary's keys; the server writes every figure as a string."""
    return {"read_rows": str(read_rows), "read_bytes": str(read_bytes),
            "written_rows": str(written_rows), "written_bytes": str(written_bytes),
            "total_rows_to_read": str(read_rows), "result_rows": "0", "result_bytes": "0",
            "elapsed_ns": str(int(elapsed_s * 1e9))}


class ClickHouseHttpServer:
    """The double: `start()`, then point a client at `dsn(...)`; `stop()` releases the folder.

    `users` maps user names to passwords (default: `default` without a password);
    `readonly_users` maps users to their profile's `readonly` level (1 or 2).
    """

    def __init__(self, folder: Path, users: Mapping[str, str] | None = None,
                 readonly_users: Mapping[str, int] | None = None) -> None:
        self.folder = folder
        self.users = dict(users or {DEFAULT_USER: ""})
        self.readonly_users = dict(readonly_users or {})
        self.calls: list[Call] = []
        self.engine: Engine | None = None
        self.httpd: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self.httpd is not None, "start the server first"
        return int(self.httpd.server_address[1])

    def dsn(self, user: str = DEFAULT_USER, password: str = "", database: str = "") -> str:
        """`http://user:password@127.0.0.1:PORT/database`."""
        auth = f"{user}:{password}@" if password else f"{user}@"
        return f"http://{auth}127.0.0.1:{self.port}/{database}"

    def start(self) -> ClickHouseHttpServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.engine = Engine(self.folder)
        handler = type("Handler", (_Handler,), {"server_double": self})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="clickhouse-double",
                                       daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
        if self.engine is not None:
            with self.engine.lock:
                self.engine.close()
        self.httpd = self.engine = None

    def __enter__(self) -> ClickHouseHttpServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def answer(self, call: Call) -> Answer:
        """The server's answer to one request."""
        self.calls.append(call)
        query_id = call.params.get("query_id") or str(uuid.uuid4())
        try:
            answer = self._answer(call)
        except ServerError as error:
            answer = self._failure(error)
        answer.headers["X-ClickHouse-Query-Id"] = query_id
        answer.headers["X-ClickHouse-Timezone"] = self._engine().timezone
        return answer

    def _engine(self) -> Engine:
        assert self.engine is not None, "start the server first"
        return self.engine

    def _answer(self, call: Call) -> Answer:
        if call.path.rstrip("/") == "/ping" or (call.path == "/" and not call.body
                                                 and "query" not in call.params):
            return Answer(200, b"Ok.\n", {"Content-Type": "text/html; charset=UTF-8"})
        if call.path != "/":
            raise ServerError(f"Code: 1000. DB::Exception: There is no handle {call.path}. "
                              "(UNKNOWN_HANDLER)")
        user = self._authenticate(call)
        if call.headers.get("content-type", "").startswith("multipart/") or \
                call.params.get("compress") == "1":
            raise ServerError("Code: 48. DB::Exception: The test double does not implement "
                              "multipart bodies or compress=1. (NOT_IMPLEMENTED)")
        return self._execute(call, self.readonly_users.get(user, 0))

    def _authenticate(self, call: Call) -> str:
        user, password = credentials(call)
        if self.users.get(user) != password:
            raise ServerError(
                f"Code: 516. DB::Exception: {user}: Authentication failed: password is "
                "incorrect, or there is no user with such name. (AUTHENTICATION_FAILED)")
        return user

    def _execute(self, call: Call, readonly: int = 0) -> Answer:
        url_query = call.params.get("query", "").encode()
        text = url_query + (b"\n" if url_query and call.body else b"") + call.body
        insert = _INSERT.match(text)
        data = text[insert.end():] if insert else None
        params = {k[len("param_"):]: v for k, v in call.params.items() if k.startswith("param_")}
        settings = {k: v for k, v in call.params.items()
                    if k not in TRANSPORT and not k.startswith("param_") and k != "compress"}
        database = call.params.get("database") or call.headers.get("x-clickhouse-database") \
            or "default"
        body, summary = self._engine().run(text, data, database, settings, params, readonly)
        fmt = self._format(text.decode(errors="replace")) if data is None else ""
        headers = {"X-ClickHouse-Summary": json.dumps(summary, separators=(",", ":")),
                   "Content-Type": _CONTENT_TYPES.get(fmt, "text/plain; charset=UTF-8")}
        if fmt:
            headers["X-ClickHouse-Format"] = fmt
        return self._compressed(call, settings, Answer(200, body, headers))

    @staticmethod
    def _format(sql: str) -> str:
        found = _FORMAT.search(sql)
        return found.group(1) if found else "TabSeparated"

    def _compressed(self, call: Call, settings: Mapping[str, str], answer: Answer) -> Answer:
        method = response_encoding(call.headers.get("accept-encoding", ""))
        wanted = settings.get("enable_http_compression")
        enabled = self._engine().compresses if wanted is None else wanted in ("1", "true")
        if enabled and method:
            answer.body = COMPRESS[method](answer.body)
            answer.headers["Content-Encoding"] = method
        return answer

    def _failure(self, error: ServerError) -> Answer:
        text = f"{error} (version {self._engine().version})\n"
        return Answer(error.status, text.encode(), {
            "X-ClickHouse-Exception-Code": str(error.code),
            "Content-Type": "text/plain; charset=UTF-8"})


def credentials(call: Call) -> tuple[str, str]:
    """The user and password of a request, where ClickHouse looks for them."""
    auth = call.headers.get("authorization", "")
    if auth.lower().startswith("basic "):
        user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
        return user or DEFAULT_USER, password
    if "x-clickhouse-user" in call.headers:
        return call.headers["x-clickhouse-user"], call.headers.get("x-clickhouse-key", "")
    return call.params.get("user", DEFAULT_USER), call.params.get("password", "")


class _Handler(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive, as urllib3's pool expects; every answer has a length."""

    protocol_version = "HTTP/1.1"
    server_double: ClickHouseHttpServer

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read `calls` instead."""

    def _serve(self) -> None:
        parts = urlsplit(self.path)
        headers = {key.lower(): value for key, value in self.headers.items()}
        try:
            body = self._body(headers)
        except (OSError, ValueError, zlib.error) as error:
            self._send(self.server_double._failure(ServerError(
                f"Code: 27. DB::Exception: Cannot read the request body: {error}. "
                "(CANNOT_PARSE_INPUT_ASSERTION_FAILED)")))
            return
        call = Call(self.command, parts.path or "/", dict(parse_qsl(parts.query,
                    keep_blank_values=True)), headers, body)
        self._send(self.server_double.answer(call))

    def _body(self, headers: Mapping[str, str]) -> bytes:
        if headers.get("transfer-encoding", "").lower() == "chunked":
            raw = self._chunked()
        else:
            raw = self.rfile.read(int(headers.get("content-length", 0) or 0))
        encoding = headers.get("content-encoding", "").lower()
        if encoding and encoding != "identity":
            if encoding not in DECOMPRESS:
                raise ValueError(f"unknown Content-Encoding {encoding!r}")
            raw = DECOMPRESS[encoding](raw)
        return raw

    def _chunked(self) -> bytes:
        chunks: list[bytes] = []
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            chunks.append(self.rfile.read(size))
            self.rfile.readline()

    def _send(self, answer: Answer) -> None:
        self.send_response(answer.status)
        for key, value in answer.headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(answer.body)))
        self.send_header("Keep-Alive", "timeout=10")
        self.end_headers()
        self.wfile.write(answer.body)

