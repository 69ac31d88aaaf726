"""The ClickHouse HTTP test double answers as ClickHouse's HTTP interface documents
(https://clickhouse.com/docs/interfaces/http): plain HTTP here, no clickhouse-connect, so
what the client relies on is pinned down on the wire."""

from __future__ import annotations

import base64
import gzip
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from testing.doubles.clickhouse_http import ClickHouseHttpServer

AUTH = {"Authorization": "Basic " + base64.b64encode(b"gkr:pw").decode()}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ClickHouseHttpServer]:
    with ClickHouseHttpServer(tmp_path / "server", {"gkr": "pw"}) as double:
        yield double


def _post(server: ClickHouseHttpServer, body: bytes, headers: dict[str, str] | None = None,
          **params: str) -> tuple[int, dict[str, str], bytes]:
    url = f"http://127.0.0.1:{server.port}/?{urlencode(params)}"
    request = urllib.request.Request(url, data=body, headers={**AUTH, **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_ping(server) -> None:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/ping", timeout=60) as answer:
        assert answer.read() == b"Ok.\n"


def test_a_query_answers_in_its_format_with_the_servers_headers(server) -> None:
    status, headers, body = _post(server, b"SELECT {x:UInt8} AS x FORMAT JSONEachRow",
                                  query_id="q-1", param_x="7")
    assert (status, body) == (200, b'{"x":7}\n')
    assert headers["X-ClickHouse-Query-Id"] == "q-1"
    assert headers["X-ClickHouse-Format"] == "JSONEachRow"
    assert headers["X-ClickHouse-Timezone"] and json.loads(headers["X-ClickHouse-Summary"])
    status, headers, body = _post(server, b"SELECT 1")
    assert (body, headers["X-ClickHouse-Format"]) == (b"1\n", "TabSeparated")


def test_errors_carry_the_servers_status_code_and_text(server) -> None:
    for sql, status, code in ((b"SELEC 1", 400, "62"), (b"SELECT * FROM nope", 404, "60")):
        got, headers, body = _post(server, sql)
        assert (got, headers["X-ClickHouse-Exception-Code"]) == (status, code)
        assert body.startswith(f"Code: {code}. DB::Exception: ".encode())
        assert body.endswith(b")\n") and b"(version " in body
    got, headers, body = _post(server, b"SELECT 1", {"Authorization": "Basic " +
                                                     base64.b64encode(b"gkr:no").decode()})
    assert (got, headers["X-ClickHouse-Exception-Code"]) == (403, "516")
    assert b"gkr: Authentication failed" in body and b"(AUTHENTICATION_FAILED)" in body


def test_an_insert_with_its_statement_in_the_url_and_gzipped_data(server) -> None:
    _post(server, b"CREATE TABLE t (a UInt8, b String) ENGINE = Memory")
    status, headers, _ = _post(server, gzip.compress(b"1\tx\n2\ty\n"),
                               {"Content-Encoding": "gzip"},
                               query="INSERT INTO t (a, b) FORMAT TabSeparated")
    assert status == 200
    assert json.loads(headers["X-ClickHouse-Summary"])["written_rows"] == "2"
    status, headers, body = _post(server, b"SELECT a, b FROM t ORDER BY a",
                                  {"Accept-Encoding": "gzip, deflate"},
                                  enable_http_compression="1")
    assert headers["Content-Encoding"] == "gzip" and gzip.decompress(body) == b"1\tx\n2\ty\n"
    status, headers, _ = _post(server, b"SELECT 1", {"Accept-Encoding": "gzip"},
                               enable_http_compression="0")
    assert "Content-Encoding" not in headers


def test_a_setting_applies_to_its_query_only(server) -> None:
    query = b"SELECT getSetting('max_block_size')"
    assert _post(server, query, max_block_size="1000")[2] == b"1000\n"
    assert _post(server, query)[2] == b"65409\n"  # ClickHouse's default again
    status, headers, _ = _post(server, b"SELECT 1", no_such_setting="1")
    assert (status, headers["X-ClickHouse-Exception-Code"]) == (404, "115")
