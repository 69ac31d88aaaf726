"""Detection: classify a node from telemetry, conditions and events (pure functions).

A node is `fault` (definite: cordon at once), `suspect` (ambiguous: run the node check) or
healthy. Values below every threshold never produce a suspicion, and a suspect whose signals a
node check cleared recently is held off (memory.held_off_until): the last-Xid gauge, a node
event and a condition outlive a passed check, and would start a check at every sweep.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runtime.warden import memory
from runtime.warden.config import DetectionConfig, MetricRule, Severity
from runtime.warden.model import Suspicion, Trigger


@dataclass(frozen=True)
class Signal:
    """One observation that crossed a threshold: what people read (with the value) and what
    raised it (without: the same signal at another value has the same key)."""

    severity: Severity
    reason: str
    key: str


def metric_signal(rule: MetricRule, value: float) -> Signal | None:
    """The signal a gauge value raises under its rule, if any."""
    levels: tuple[tuple[Severity, float | None], ...] = (
        ("definite", rule.definite_at), ("ambiguous", rule.ambiguous_at))
    for severity, level in levels:
        if level is not None and value >= level:
            key = f"{rule.metric} >= {level:g}"
            return Signal(severity, f"{rule.metric}={value:g} >= {level:g}", key)
    return None


def xid_signal(config: DetectionConfig, value: float) -> Signal | None:
    """The signal of the last Xid seen on a node's GPUs; application Xids raise none."""
    code = int(value)
    if code in config.xid.definite:
        return Signal("definite", f"Xid {code}", f"Xid {code}")
    if code in config.xid.ambiguous:
        return Signal("ambiguous", f"Xid {code}", f"Xid {code}")
    return None


def condition_signals(config: DetectionConfig, node: dict[str, Any]) -> list[Signal]:
    """Signals of the node's conditions that match a faulty status."""
    current = {c.get("type"): c.get("status") for c in node.get("status", {}).get("conditions", [])}
    return [
        Signal(rule.severity, f"condition {rule.type}={rule.status}",
               f"condition {rule.type}={rule.status}")
        for rule in config.conditions
        if current.get(rule.type) == rule.status
    ]


def event_signals(config: DetectionConfig, events: list[dict[str, Any]]) -> list[Signal]:
    """Signals of recent node events whose reason occurred often enough."""
    counts: dict[str, int] = {}
    for event in events:
        reason = event.get("reason", "")
        counts[reason] = counts.get(reason, 0) + int(event.get("count") or 1)
    return [
        Signal(rule.severity, f"event {rule.reason} x{counts[rule.reason]}",
               f"event {rule.reason}")
        for rule in config.events
        if counts.get(rule.reason, 0) >= rule.min_count
    ]


def verdict(node: str, signals: list[Signal]) -> Suspicion | None:
    """Definite beats ambiguous; no signal means healthy."""
    for severity, kind in (("definite", "fault"), ("ambiguous", "suspect")):
        chosen = [s for s in signals if s.severity == severity]
        if chosen:
            reason = "; ".join(sorted(s.reason for s in chosen))
            keys = tuple(sorted({s.key for s in chosen}))
            return Suspicion(node, Trigger(kind, reason, signals=keys))  # type: ignore[arg-type]
    return None


def held_off(node: dict[str, Any], suspicion: Suspicion, now: float, holdoff_s: float) -> bool:
    """A suspect whose every signal a node check cleared within the hold-off (`holdoff_s`,
    the configured one, at most); a definite fault, or a suspect with a signal the check did
    not see, is never held off."""
    if suspicion.trigger.kind != "suspect":
        return False
    notes, name = memory.notes(node), node.get("metadata", {}).get("name", "")
    until = memory.held_off_until(notes, suspicion.trigger.signals, now, holdoff_s, node=name)
    return until is not None


class Detector:
    """One detection sweep over the watched nodes, through the cluster and telemetry seams."""

    def __init__(self, config: DetectionConfig, cluster: Any, telemetry: Any) -> None:
        self.config, self.cluster, self.telemetry = config, cluster, telemetry

    def sweep(self) -> list[Suspicion]:
        """Suspicions for schedulable nodes; cordoned nodes belong to recovery (or a human)."""
        nodes = self.cluster.list_nodes(self.config.node_selector)
        telemetry = self._telemetry_signals()
        events = self._recent_events()
        now = time.time()
        found = []
        for node in nodes:
            if node.get("spec", {}).get("unschedulable"):
                continue
            name = node["metadata"]["name"]
            signals = [*telemetry.get(name, []), *condition_signals(self.config, node)]
            signals += event_signals(self.config, events.get(name, []))
            suspicion = verdict(name, signals)
            holdoff = self.config.cleared_holdoff_s
            if suspicion is not None and not held_off(node, suspicion, now, holdoff):
                found.append(suspicion)
        return found

    def _telemetry_signals(self) -> dict[str, list[Signal]]:
        by_node: dict[str, list[Signal]] = {}
        for name, value in self.telemetry.node_max(self.config.xid.metric).items():
            _add(by_node, name, xid_signal(self.config, value))
        for rule in self.config.metrics:
            for name, value in self.telemetry.node_max(rule.metric).items():
                _add(by_node, name, metric_signal(rule, value))
        return by_node

    def _recent_events(self) -> dict[str, list[dict[str, Any]]]:
        """Recent events by node: one list of every node's events, not one call per node
        (a sweep over a 400-node cluster made 400 calls, benchmarks/fleet/warden.py)."""
        horizon = time.time() - self.config.events_window_s
        by_node: dict[str, list[dict[str, Any]]] = {}
        for event in self.cluster.node_events():
            if _event_time(event) >= horizon:
                name = event.get("involvedObject", {}).get("name", "")
                by_node.setdefault(name, []).append(event)
        return by_node


def _add(by_node: dict[str, list[Signal]], node: str, signal: Signal | None) -> None:
    if signal is not None:
        by_node.setdefault(node, []).append(signal)


def _event_time(event: dict[str, Any]) -> float:
    stamp = event.get("lastTimestamp") or event.get("eventTime") or ""
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
