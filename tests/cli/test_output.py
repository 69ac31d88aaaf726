"""What commands print: kubectl's plain columns when piped (no box drawing, nothing cut),
RFC 3339 times in JSON and YAML, "No resources found" for an empty list, and user text
exactly as written (never read as Rich markup)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import yaml

from generator.cli._app import Printer
from generator.cli._output import Output, age, emit
from tests.cli.conftest import NS, SUBMIT, gkr

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
BOX = set("│─┃━┏┓┗┛┌┐└┘╭╮╰╯┡┩")


def test_a_piped_table_is_plain_and_whole(capsys) -> None:
    long = "0/64 nodes are available: " + "64 Insufficient nvidia.com/gpu; " * 8
    started = datetime.now(UTC) - timedelta(hours=3, minutes=5)
    emit([{"name": "a", "reason": long, "created": started},
          {"name": "bb[/]", "reason": "", "created": None}], Output.table,
         {"name": "NAME", "reason": "REASON", "created": "AGE"})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "REASON", "AGE"]
    assert long.strip() in lines[1] and lines[1].endswith("3h5m")
    assert lines[2].startswith("bb[/]")
    assert not BOX & set("".join(lines))


def test_an_empty_list_says_no_resources_found(capsys) -> None:
    emit([], Output.table)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "No resources found\n"
    emit([], Output.json)
    assert json.loads(capsys.readouterr().out) == []


def test_times_are_rfc3339_in_json_and_yaml(capsys) -> None:
    moment = datetime(2024, 5, 1, 10, 0, 0, 123456, tzinfo=UTC)
    emit([{"created": moment, "nested": [{"at": moment}]}], Output.json)
    row = json.loads(capsys.readouterr().out)[0]
    assert row == {"created": "2024-05-01T10:00:00Z", "nested": [{"at": "2024-05-01T10:00:00Z"}]}
    emit([{"created": moment}], Output.yaml)
    assert yaml.safe_load(capsys.readouterr().out) == [{"created": "2024-05-01T10:00:00Z"}]
    assert age(moment, moment + timedelta(days=2, hours=4)) == "2d4h"


def test_list_and_status_through_the_api(repo, apiserver) -> None:
    assert gkr("list", "--cluster", "usc1-prod").err.startswith("No resources found")
    assert gkr(*SUBMIT).code == 0
    listed = json.loads(gkr("list", "--cluster", "usc1-prod", "-o", "json").out)
    assert RFC3339.match(listed[0]["created"]) and "age" not in listed[0]
    status = yaml.safe_load(gkr("status", "train-a", "--cluster", "usc1-prod", "-n", NS,
                                "-o", "yaml").out)[0]
    assert RFC3339.match(status["created"])
    table = gkr("list", "--cluster", "usc1-prod").out.splitlines()
    assert table[0].split() == ["NAME", "KIND", "NAMESPACE", "PHASE", "AGE", "OWNER"]
    assert table[1].split()[:3] == ["train-a", "RayJob", NS]


def test_user_text_is_never_markup(capsys) -> None:
    text = "wrote kustomize/train[v2].yaml image: foo[/] [bold]x[/bold] :smile:"
    Printer().print(text)
    Printer(stderr=True).print(text)
    assert capsys.readouterr() == (text + "\n", text + "\n")


def test_markup_in_specs_reaches_the_user_as_written(repo) -> None:
    bad = repo / "jobs/llm/train[v2].yaml"
    bad.write_text((repo / "jobs/llm/llm-pretrain-7b.yaml").read_text())
    shown = gkr("validate", str(bad))
    assert shown.code == 1 and "train[v2].yaml" in shown.err, shown.err
    image = repo / "jobs/llm/imagetest.yaml"
    image.write_text((repo / "jobs/llm/llm-pretrain-7b.yaml").read_text()
                     .replace("image: trainer", 'image: "foo[/]"'))
    shown = gkr("validate", str(image))
    assert shown.code == 1 and "'foo[/]'" in shown.err, shown.err
    assert "Traceback" not in shown.err
