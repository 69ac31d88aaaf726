"""A small evaluator of NetworkPolicy ingress (networking.k8s.io/v1), faithful to
https://kubernetes.io/docs/concepts/services-networking/network-policies/ for what the
rendered policies use:

* a pod is isolated for ingress when a policy of its namespace selects it (podSelector) with
  Ingress among its policyTypes; an unisolated pod admits everything;
* an isolated pod admits a connection when some rule of some selecting policy admits it
  (policies are additive); a rule admits when its `ports` (absent: all; a port number and
  protocol, TCP by default; `endPort` ranges) and its `from` (absent or empty: every
  source) both match;
* a peer with only podSelector matches pods of the policy's own namespace; only
  namespaceSelector: every pod of the selected namespaces; both: pods matching both; an
  ipBlock: sources whose IP is in `cidr` and not in `except` (pod IPs are not matched by
  ipBlocks here, as the docs advise not to rely on either way);
* label selectors: matchLabels and matchExpressions (In, NotIn, Exists, DoesNotExist);
  an empty selector selects everything.

Not modelled: named ports, SCTP/UDP specifics, egress, and traffic from the pod's own node
(always admitted, see generator/netpolicy.py).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Peer:
    """One side of a connection: a pod (namespace, labels, namespace labels) or an IP."""

    namespace: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    namespace_labels: dict[str, str] = field(default_factory=dict)
    ip: str | None = None

    def __post_init__(self) -> None:
        if self.namespace is not None:
            self.namespace_labels.setdefault("kubernetes.io/metadata.name", self.namespace)


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for term in selector.get("matchExpressions") or []:
        key, op, values = term["key"], term["operator"], term.get("values") or []
        matched = {"In": key in labels and labels[key] in values,
                   "NotIn": key not in labels or labels[key] not in values,
                   "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not matched:
            return False
    return True


def _peer_matches(peer: dict[str, Any], policy_namespace: str, source: Peer) -> bool:
    if "ipBlock" in peer:
        if source.ip is None:
            return False
        ip = ipaddress.ip_address(source.ip)
        block = peer["ipBlock"]
        return ip in ipaddress.ip_network(block["cidr"]) and not any(
            ip in ipaddress.ip_network(e) for e in block.get("except") or [])
    if source.namespace is None:
        return False
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], source.namespace_labels):
            return False
    elif source.namespace != policy_namespace:
        return False
    return "podSelector" not in peer or selects(peer["podSelector"], source.labels)


def _port_matches(rule: dict[str, Any], port: int, protocol: str) -> bool:
    ports = rule.get("ports")
    if not ports:
        return True
    for entry in ports:
        low = entry.get("port")
        high = entry.get("endPort", low)
        if entry.get("protocol", "TCP") == protocol and (low is None or low <= port <= high):
            return True
    return False


def admitted(policies: list[dict[str, Any]], target: Peer, source: Peer, port: int,
             protocol: str = "TCP") -> bool:
    selecting = [p for p in policies
                 if p["metadata"]["namespace"] == target.namespace
                 and selects(p["spec"]["podSelector"], target.labels)
                 and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])]
    if not selecting:
        return True
    return any(_port_matches(rule, port, protocol)
               and (not rule.get("from") or any(_peer_matches(peer, p["metadata"]["namespace"],
                                                              source) for peer in rule["from"]))
               for p in selecting for rule in p["spec"].get("ingress") or [])
