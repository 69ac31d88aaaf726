"""Cordon memory kept in node annotations, so it survives Warden and every incident.

`cordons` holds the epoch seconds of the cordons still inside the window; the count, the time
of the last and its reason are written beside it for people and for `gkr warden history`.
`cleared` holds the suspect signals a passed node check cleared, `cleared-until` when they
may start a check again; a cordon forgets them (what follows an incident is checked anew).

Annotations are anyone's to write who may patch nodes, and outlive Warden's versions: a value
Warden could not have written (not finite, before 1970, later than now plus CLOCK_SKEW_S, a
hold-off longer than configured) is ignored as if absent and logged, never acted upon.
"""

from __future__ import annotations

import logging
import math
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

CLOCK_SKEW_S = 300.0
"""How far ahead of this process's clock a stamp written by another Warden replica (or before
a restart on another node) may lie and still count. Node clocks on GKE are NTP-synchronised
to well under a second; 5 minutes leaves room for a clock being corrected, not for a stamp
in the future: a cordon time later than now plus this was not written at a cordon."""

MAX_CORDONS = 1000
"""The most cordon times counted and kept (the newest), so that the count and the annotation
stay bounded whatever the annotation held; escalation needs a handful (`escalate_after`)."""

log = logging.getLogger(__name__)


def notes(node: dict[str, Any]) -> dict[str, str]:
    """The node's annotations (empty when it has none)."""
    return dict(node.get("metadata", {}).get("annotations") or {})


def _ignored(node: str, key: str, value: str, why: str) -> None:
    log.warning("node %s: annotation %s=%r ignored: %s", node or "?", key, value[:80], why)


def _cordon_time(text: str, now: float) -> float | None:
    """The epoch seconds of one recorded cordon, or None when Warden cannot have written it."""
    try:
        at = float(text)
    except ValueError:
        return None
    return at if math.isfinite(at) and 0 <= at <= now + CLOCK_SKEW_S else None


def recent_cordons(notes: dict[str, str], now: float, window_s: float, *, node: str = ""
                   ) -> list[float]:
    """Times of the cordons still inside the window, oldest first (at most MAX_CORDONS);
    entries that are no cordon time (malformed, not finite, negative, later than now plus
    CLOCK_SKEW_S) are dropped and logged."""
    times, ignored = [], []
    for part in notes.get(CORDONS, "").split(","):
        at = _cordon_time(part, now)
        if at is None:
            ignored += [part] if part.strip() else []
        elif now - at < window_s:
            times.append(at)
    if ignored:
        _ignored(node, CORDONS, ",".join(ignored), "not an epoch second from 1970 to now "
                 f"(+{CLOCK_SKEW_S:.0f}s clock skew)")
    return sorted(times)[-MAX_CORDONS:]


def cordon_patch(notes: dict[str, str], now: float, window_s: float, reason: str, incident: str,
                 *, node: str = "") -> tuple[dict[str, Any], int]:
    """The node patch that cordons it and records one more cordon; and the new recent count
    (what was ignored is not written back)."""
    times = [*recent_cordons(notes, now, window_s, node=node), now][-MAX_CORDONS:]
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


def held_off_until(notes: dict[str, str], signals: Sequence[str], now: float,
                   holdoff_s: float, *, node: str = "") -> str | None:
    """When the hold-off of these suspect signals ends, if it has not: a check cleared every
    one of them. None when a check is due: a signal it did not see, the hold-off over (or
    unreadable, see holdoff_end), or no signals (a trigger from a person)."""
    cleared = set(notes.get(CLEARED, "").split(SIGNALS))
    if not signals or not set(signals) <= cleared:
        return None
    end = holdoff_end(notes, now, holdoff_s, node=node)
    return stamp(end) if end is not None and now < end else None


def holdoff_end(notes: dict[str, str], now: float, holdoff_s: float, *, node: str = ""
                ) -> float | None:
    """The recorded end of the hold-off, at most now + `holdoff_s` (the configured hold-off).

    clear_patch writes its own now + `holdoff_s`; an end later than now + `holdoff_s` +
    CLOCK_SKEW_S was not written by it (a hand-written "year 3000", a longer hold-off of an
    older config) and is ignored, logged: were it only capped at every read, it would hold
    the node off for ever. Within the skew it is capped, so no hold-off outlasts the value
    configured by more than the skew.
    """
    text = notes.get(CLEARED_UNTIL, "")
    end = parse_stamp(text)
    if end is None:
        if text:
            _ignored(node, CLEARED_UNTIL, text, "not an RFC 3339 time with a zone")
        return None
    if end > now + holdoff_s + CLOCK_SKEW_S:
        _ignored(node, CLEARED_UNTIL, text, f"later than a hold-off of {holdoff_s:.0f}s "
                 f"started now (+{CLOCK_SKEW_S:.0f}s clock skew)")
        return None
    return min(end, now + holdoff_s)


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
