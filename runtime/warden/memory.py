"""Cordon memory kept in node annotations, so it survives Warden and every incident.

`cordons` holds the epoch seconds of the cordons still inside the window; the count, the time
of the last and its reason are written beside it for people and for `gkr warden history`.
`cleared` holds the suspect signals a passed node check cleared, `cleared-until` when they
may start a check again; a cordon forgets them (what follows an incident is checked anew).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from runtime.identity import Warden
from runtime.warden.reservations import TRACKED_JOB, TRACKED_SECONDS, parse_stamp, stamp

PREFIX = Warden.PREFIX
CORDONS = Warden.CORDONS
RECENT = Warden.RECENT_CORDONS
LAST = Warden.LAST_CORDON
REASON = Warden.REASON
STATE = Warden.STATE
INCIDENT = Warden.INCIDENT
POWER = Warden.POWER
OWNED = Warden.CORDONED_BY
CLEARED = Warden.CLEARED
CLEARED_UNTIL = Warden.CLEARED_UNTIL
SIGNALS = "; "  # between the signals of `cleared`
OWNER = "warden"
MAX_REASON = 250


def notes(node: dict[str, Any]) -> dict[str, str]:
    """The node's annotations (empty when it has none)."""
    return dict(node.get("metadata", {}).get("annotations") or {})


def recent_cordons(notes: dict[str, str], now: float, window_s: float) -> list[float]:
    """Times of the cordons still inside the window; malformed entries are dropped."""
    times = []
    for part in notes.get(CORDONS, "").split(","):
        try:
            times.append(float(part))
        except ValueError:
            continue
    return [t for t in times if now - t < window_s]


def cordon_patch(notes: dict[str, str], now: float, window_s: float, reason: str, incident: str
                 ) -> tuple[dict[str, Any], int]:
    """The node patch that cordons it and records one more cordon; and the new recent count."""
    times = [*recent_cordons(notes, now, window_s), now]
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    new = {
        CORDONS: ",".join(f"{t:.0f}" for t in times),
        RECENT: str(len(times)),
        LAST: stamp,
        REASON: reason[:MAX_REASON],
        STATE: "cordoned",
        INCIDENT: incident,
        OWNED: OWNER,
        # A faulty node is no job's to reserve: its recovery, not a relaunch, comes next.
        TRACKED_JOB: None,
        TRACKED_SECONDS: None,
        CLEARED: None,
        CLEARED_UNTIL: None,
    }
    return {"spec": {"unschedulable": True}, "metadata": {"annotations": new}}, len(times)


def clear_patch(signals: Sequence[str], now: float, holdoff_s: float) -> tuple[dict[str, Any], str]:
    """The node patch that holds these suspect signals off for `holdoff_s`; and its end."""
    until = stamp(now + holdoff_s)
    cleared = {CLEARED: SIGNALS.join(sorted(set(signals))), CLEARED_UNTIL: until}
    return {"metadata": {"annotations": cleared}}, until


def held_off_until(notes: dict[str, str], signals: Sequence[str], now: float) -> str | None:
    """When the hold-off of these suspect signals ends, if it has not: a check cleared every
    one of them. None when a check is due: a signal it did not see, the hold-off over (or
    unreadable), or no signals (a trigger from a person)."""
    until = notes.get(CLEARED_UNTIL, "")
    end = parse_stamp(until)
    cleared = set(notes.get(CLEARED, "").split(SIGNALS))
    if signals and end is not None and now < end and set(signals) <= cleared:
        return until
    return None


def uncordon_patch() -> dict[str, Any]:
    """Uncordon; the cordon history stays so that the next incident remembers this one."""
    notes = {STATE: "healthy", OWNED: None, POWER: None, INCIDENT: None}
    return {"spec": {"unschedulable": None}, "metadata": {"annotations": notes}}


def state_patch(state: str) -> dict[str, Any]:
    """Record the phase of recovery on the node, for the recovery sweep and for people."""
    return {"metadata": {"annotations": {STATE: state}}}


def cordoned_by_warden(node: dict[str, Any]) -> bool:
    """A node Warden cordoned and still owns (a human's cordon is left alone)."""
    unschedulable = bool(node.get("spec", {}).get("unschedulable"))
    return unschedulable and notes(node).get(OWNED) == OWNER


def awaits_recovery(node: dict[str, Any]) -> bool:
    """Cordoned by Warden and not handed to a human after exhausting its attempts."""
    return cordoned_by_warden(node) and notes(node).get(STATE) != "needs-human"
