"""What the read-only SQL path (`gkr telemetry sql`, the diagnosis agent's skill) lets through.

The engine is the guard: a read-only store runs every statement with ClickHouse's `readonly =
1` (https://clickhouse.com/docs/operations/settings/permissions-for-queries: only read
queries; no SET, no change of `readonly` itself; no CREATE TEMPORARY TABLE, which every table
function that reads files or the network needs). chDB and a server enforce it alike; a
cluster's reader user has it in its profile besides (generator/platform/telemetry.py).

What `readonly` leaves open, measured on chDB 26.9 (tests/telemetry/test_readonly.py), is
checked here on the engine's own parse of the statement (`formatQuery`, then `EXPLAIN AST`),
never on the text with a pattern: string literals, comments, quoting and case cannot hide a
name from the parser.

* More than one statement: chDB runs `SELECT 1; SELECT file(…)` as two. `formatQuery` refuses
  multi-statements, and the statement it returns is the one checked and run.
* `INTO OUTFILE`: clickhouse-local, and so chDB, writes the file even in read-only mode (a
  server refuses it over HTTP). The parser makes it a literal child of the query node.
* The scalar `file()` reads any file the process can, and the AI functions call a provider
  over the network; readonly allows both.
* Table functions other than those that make rows from their arguments or read this store's
  tables: readonly refuses most, and the rest (`cluster`, `urlCluster`: a cluster's name is
  looked up first; chDB's `python`, which reads objects of this process) are refused here.
  The names are the engine's `system.table_functions`, so one added in a later ClickHouse is
  refused until it is listed below.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from runtime.errors import Category, RuntimeFailure

# Query kinds that read (the AST root's name as EXPLAIN AST prints it): SELECT, EXPLAIN,
# DESCRIBE, SHOW …, EXISTS …. KILL QUERY, which readonly allows, is not reading.
READ_ROOTS = frozenset({"SelectWithUnionQuery", "SelectIntersectExceptQuery", "Explain",
                        "DescribeQuery"})
READ_ROOT_PREFIXES = ("Show", "Exists")
# Table functions that make rows from their arguments or read this database's own tables.
LOCAL_TABLE_FUNCTIONS = frozenset({
    "numbers", "numbers_mt", "zeros", "zeros_mt", "generateSeries", "generate_series",
    "primes", "values", "format", "generateRandom", "null", "view", "merge", "loop"})
# Scalar functions that reach outside the store (ClickHouse's function reference: `file`
# reads a file "as a string"; the `AI` category sends text to a provider).
OUTSIDE_FUNCTIONS = frozenset(name.lower() for name in (
    "file", "aiGenerate", "aiClassify", "aiExtract", "aiTranslate", "aiEmbed", "aiSimilarity",
    "aiFilter"))
# One EXPLAIN AST line: indentation (one space a level), the node's name, then its text.
_NODE = re.compile(r"^( *)(\S+) ?(.*)$")
_TSV_ESCAPE = re.compile(r"\\(.)")
_TSV_CHARACTERS = {"t": "\t", "n": "\n", "r": "\r", "0": "\0", "b": "\b", "f": "\f"}
_FUNCTION = re.compile(r"^(.+?)(?: \(alias .*\))?(?: \(children \d+\))?$")


class ReadOnlyRefused(RuntimeFailure):
    """A statement the read-only path refuses before the engine runs it; says why."""

    category = Category.INVALID_INPUT


@dataclass(frozen=True)
class Node:
    depth: int
    name: str
    text: str


def tsv_field(text: str) -> str:
    """One TabSeparated field as text (ClickHouse escapes \\, tab, newline and quotes)."""
    return _TSV_ESCAPE.sub(lambda m: _TSV_CHARACTERS.get(m.group(1), m.group(1)), text)


def parse_ast(lines: Iterable[str]) -> list[Node]:
    """EXPLAIN AST's rows as nodes (depth, name, the rest of the line)."""
    nodes = []
    for line in lines:
        match = _NODE.match(line)
        if match:
            nodes.append(Node(len(match.group(1)), match.group(2), match.group(3)))
    return nodes


def functions(nodes: list[Node]) -> set[str]:
    """The names of every function and table function the statement calls."""
    found = set()
    for node in nodes:
        if node.name == "Function":
            match = _FUNCTION.match(node.text)
            found.add(match.group(1) if match else node.text)
    return found


def refusal(nodes: list[Node], table_functions: Iterable[str]) -> str | None:
    """Why the parsed statement may not run on the read-only path, or None."""
    if not nodes:
        return "the engine gave no parse of the statement"
    root = nodes[0].name
    if root not in READ_ROOTS and not root.startswith(READ_ROOT_PREFIXES):
        return (f"{root} is not a read: only SELECT, EXPLAIN, DESCRIBE, SHOW and EXISTS run "
                "here (writes go through `gkr telemetry ingest`)")
    if _writes_a_file(nodes):
        return "INTO OUTFILE writes a file; the rows are printed instead"
    called = {name.lower(): name for name in functions(nodes)}
    local = {name.lower() for name in LOCAL_TABLE_FUNCTIONS}
    outside = sorted({called[name] for name in called if name in OUTSIDE_FUNCTIONS} | {
        called[name] for name in (n.lower() for n in table_functions)
        if name in called and name not in local})
    if outside:
        return (f"{', '.join(outside)} reach{'es' if len(outside) == 1 else ''} outside the "
                "store (files, the network, other servers or this process): the read-only "
                "path reads the telemetry tables only")
    return None


def _writes_a_file(nodes: list[Node]) -> bool:
    """INTO OUTFILE: the parser keeps its file name (and COMPRESSION) as literal children of
    the query-with-output node (ParserQueryWithOutput.cpp), where no other literal goes."""
    parents: list[Node] = []
    for node in nodes:
        del parents[node.depth:]
        if node.name == "Literal" and parents and _with_output(parents[-1].name):
            return True
        parents.append(node)
    return False


def _with_output(name: str) -> bool:
    return name in READ_ROOTS or name.startswith(READ_ROOT_PREFIXES)
