"""Warden's node-annotation memory holds only what Warden could have written: property-based
over hostile annotation values (not finite, huge, negative, non-numeric, far future, far past)."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.errors import ConfigError
from runtime.warden import memory
from runtime.warden.config import parse_config
from runtime.warden.detect import held_off
from runtime.warden.model import Suspicion, Trigger
from runtime.warden.reservations import parse_stamp, stamp

DAY = 86400.0
WINDOW = 7 * DAY
HOLDOFF = 6 * 3600.0
ESCALATE_AFTER = 2  # the smallest setting at which a first cordon must not escalate

nows = st.floats(1.5e9, 4e9)  # 2017 to 2096


def _hostile_times(now: float) -> st.SearchStrategy[str]:
    """A cordon entry Warden cannot have written (`now` being the reader's clock)."""
    skew = memory.CLOCK_SKEW_S
    return st.one_of(
        st.sampled_from(["nan", "inf", "-inf", "+inf", "NaN", "infinity", "1e400", "-1e400",
                         "1e300", "", " ", "junk", "0x10", "None", "1,5"]),
        st.floats(allow_nan=True, allow_infinity=True).filter(
            lambda t: not 0 <= t <= now + skew).map(repr),  # non-finite, negative, future
        st.floats(now + skew + 1, 1e15).map(lambda t: f"{t:.0f}"),  # the far future
        st.floats(0, now - WINDOW - 1).map(lambda t: f"{t:.0f}"),  # the far past
        st.text(max_size=20).filter(lambda t: not _is_time(t)),  # non-numeric
    )


def _is_time(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@st.composite
def hostile_cordons(draw: st.DrawFn) -> tuple[float, str]:
    now = draw(nows)
    parts = draw(st.lists(_hostile_times(now), min_size=1, max_size=30))
    return now, ",".join(parts)


@given(hostile_cordons())
def test_no_planted_cordon_time_escalates_a_first_cordon(case: tuple[float, str]) -> None:
    now, planted = case
    patch, count = memory.cordon_patch({memory.CORDONS: planted}, now, WINDOW, "Xid 79", "r/1")
    written = patch["metadata"]["annotations"]
    assert count == 1 < ESCALATE_AFTER
    assert (written[memory.CORDONS], written[memory.RECENT]) == (f"{now:.0f}", "1")


@given(hostile_cordons(), st.integers(0, 5))
def test_genuine_cordons_count_beside_planted_ones(case: tuple[float, str], genuine: int) -> None:
    now, planted = case
    times = [f"{now - 60 * (i + 1):.0f}" for i in range(genuine)]
    notes = {memory.CORDONS: ",".join([planted, *times])}
    assert len(memory.recent_cordons(notes, now, WINDOW)) == genuine


def test_a_cordon_within_the_clock_skew_counts_and_one_beyond_it_does_not() -> None:
    now = 2e9
    ahead = {memory.CORDONS: f"{now + memory.CLOCK_SKEW_S - 1:.0f}"}
    beyond = {memory.CORDONS: f"{now + memory.CLOCK_SKEW_S + 1:.0f}"}
    assert len(memory.recent_cordons(ahead, now, WINDOW)) == 1
    assert memory.recent_cordons(beyond, now, WINDOW) == []


def test_the_count_is_bounded_however_many_stamps_the_annotation_holds() -> None:
    now = 2e9
    many = ",".join(f"{now - i:.0f}" for i in range(3 * memory.MAX_CORDONS))
    patch, count = memory.cordon_patch({memory.CORDONS: many}, now, WINDOW, "Xid 79", "r/1")
    kept = patch["metadata"]["annotations"][memory.CORDONS].split(",")
    assert count == len(kept) == memory.MAX_CORDONS
    assert kept[-1] == f"{now:.0f}"  # the newest are the ones kept


def _cleared(until: str) -> dict[str, str]:
    return {memory.CLEARED: "Xid 74", memory.CLEARED_UNTIL: until}


def _hostile_until(now: float) -> st.SearchStrategy[str]:
    """A hold-off end: any text, or any RFC 3339 time from year 1 to 9999 (the far future
    included), with or without a zone."""
    return st.one_of(
        st.text(max_size=40),
        st.floats(-6.2e10, 2.5e11).map(stamp),
        st.floats(now, now + 100 * 365 * DAY).map(stamp),
        st.sampled_from(["3000-01-01T00:00:00Z", "9999-12-31T23:59:59-23:59", "inf", "nan",
                         "2999-01-01T00:00:00", "0001-01-01T00:00:00+23:59"]),
    )


@st.composite
def hostile_holdoffs(draw: st.DrawFn) -> tuple[float, float, str]:
    now = draw(nows)
    return now, draw(st.floats(0, 30 * DAY)), draw(_hostile_until(now))


@given(hostile_holdoffs())
def test_no_hold_off_is_longer_than_configured(case: tuple[float, float, str]) -> None:
    now, holdoff, until = case
    end = memory.held_off_until(_cleared(until), ["Xid 74"], now, holdoff)
    if end is not None:
        parsed = parse_stamp(end)
        assert parsed is not None and now < parsed <= now + holdoff


@given(hostile_holdoffs(), st.floats(0, 400 * DAY))
def test_one_written_stamp_holds_off_no_longer_than_configured_plus_the_skew(
        case: tuple[float, float, str], after: float) -> None:
    """A cap at every read alone would hold a node off for ever (now + hold-off moves on):
    two reads further apart than the hold-off and the skew never both find it held."""
    now, holdoff, until = case
    later = now + holdoff + memory.CLOCK_SKEW_S + after
    held = [memory.held_off_until(_cleared(until), ["Xid 74"], at, holdoff) is not None
            for at in (now, later)]
    assert held != [True, True]


def test_a_year_3000_hold_off_is_ignored_and_a_check_is_due(
        caplog: pytest.LogCaptureFixture) -> None:
    now = 2e9
    node = {"metadata": {"name": "gpu-7", "annotations": _cleared("3000-01-01T00:00:00Z")}}
    suspect = Suspicion("gpu-7", Trigger("suspect", "Xid 74", signals=("Xid 74",)))
    with caplog.at_level(logging.WARNING, logger=memory.__name__):
        assert not held_off(node, suspect, now, HOLDOFF)
    assert "node gpu-7" in caplog.text and "3000-01-01T00:00:00Z" in caplog.text


def test_a_stamp_just_past_the_hold_off_is_capped_to_it() -> None:
    """A replica whose clock runs a minute ahead wrote it: still held, but no longer than
    configured from now."""
    now = 2e9
    until = stamp(now + HOLDOFF + 60)
    assert memory.held_off_until(_cleared(until), ["Xid 74"], now, HOLDOFF) == stamp(now + HOLDOFF)


def test_ignored_cordon_times_are_logged_with_the_node(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=memory.__name__):
        memory.recent_cordons({memory.CORDONS: "inf,1e300,12,oops"}, 2e9, WINDOW, node="gpu-3")
    assert "node gpu-3" in caplog.text and "inf,1e300,oops" in caplog.text


@pytest.mark.parametrize(("section", "key", "value"), [
    ("detection", "cleared_holdoff_s", float("inf")),
    ("detection", "cleared_holdoff_s", float("nan")),
    ("detection", "cleared_holdoff_s", 1e12),
    ("memory", "window_s", float("inf")),
])
def test_an_unbounded_hold_off_or_window_is_refused_in_config(section: str, key: str,
                                                              value: float) -> None:
    with pytest.raises(ConfigError, match=rf"warden.yaml: {section}\.{key}: "):
        parse_config({section: {key: value}}, "warden.yaml")
