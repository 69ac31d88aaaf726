"""The ways Warden tells owners that their workload is about to be drained (`OwnerNotifier`).

A Warning Event on each pod (what `kubectl describe pod` shows), an annotation on the workload
(what a tool or the owner's own automation can read), and, when one is configured, a message
to a chat webhook. The Kubernetes ones are Warden's record and fail the activity, which
retries, as any Kubernetes write of Warden's; the webhook is a courtesy and never does.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from contextlib import suppress
from typing import Any

from runtime.errors import ConfigError
from runtime.identity import Env, Warden
from runtime.kube import NotFound
from runtime.warden.errors import ApiFailure
from runtime.warden.interfaces import Cluster, DrainNotice, OwnerNotifier

log = logging.getLogger(__name__)

DRAIN = Warden.DRAIN  # the workload's annotation: JSON of `drain_note`


def kube_notifiers(cluster: Cluster) -> list[OwnerNotifier]:
    """The notices Warden always gives: the pods' Events, then the workload's annotation."""
    return [EventNotifier(cluster), AnnotationNotifier(cluster)]


class EventNotifier:
    """A Warning Event `WardenDrainScheduled` on each pod to be evicted."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def notify(self, notices: Sequence[DrainNotice]) -> None:
        for notice in notices:
            for ref in notice.pods:
                namespace, name = ref.split("/", 1)
                self.cluster.post_event(namespace, drain_event(notice, namespace, name))


class AnnotationNotifier:
    """The workload's drain annotation: node, reason, deadline and pods, as JSON."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def notify(self, notices: Sequence[DrainNotice]) -> None:
        for notice in notices:
            workload = notice.workload
            with suppress(NotFound):  # the workload ended meanwhile: there is nothing to mark
                self.cluster.annotate(workload.kind, workload.namespace, workload.name,
                                      {DRAIN: json.dumps(drain_note(notice), sort_keys=True)})


class WebhookNotifier:
    """One message per drain to an incoming webhook in Slack's format: a POST of `{"text":
    ...}` as JSON, answered 200 `ok` (https://api.slack.com/messaging/webhooks); Mattermost's
    incoming webhooks take the same. One message, not one per workload: a webhook that hangs
    costs one timeout, well inside the activity's (config.WardenConfig checks it). The URL's
    path is the webhook's credential: no log line, error or repr shows more than its origin."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self._url, self.origin, self.timeout_s = url, _origin(url), timeout_s

    def __repr__(self) -> str:
        return f"WebhookNotifier({self.origin}/...)"

    def notify(self, notices: Sequence[DrainNotice]) -> None:
        if not notices:
            return
        # Logged, never raised: a chat outage must not keep a faulty node from its repair (the
        # drain comes before the reboot), and the Event and annotation already told the owner.
        try:
            post_json(self._url, {"text": drain_text(notices)}, self.timeout_s, self.origin)
        except ApiFailure as error:
            log.warning("drain notice of node %s not delivered to %s: %s", notices[0].node,
                        self.origin, error)


def _origin(url: str) -> str:
    """The scheme, host and port of an http(s) URL: what may be shown of a webhook's."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = f":{parts.port}" if parts.port else ""  # never the user or password: secrets
    except ValueError:
        port = "?"
    if parts.scheme not in ("http", "https") or not parts.hostname or port == "?":
        raise ConfigError("", "must be an http(s) URL", Env.WARDEN_WEBHOOK)
    return f"{parts.scheme}://{parts.hostname}{port}"


def post_json(url: str, body: Any, timeout_s: float, shown_as: str) -> None:
    """POST JSON and ignore the answer's body; failures become ApiFailure naming `shown_as`."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            response.read()
    except urllib.error.HTTPError as error:
        raise ApiFailure("webhook", error.code, f"POST {shown_as}",
                         error.read().decode(errors="replace")) from None
    except (urllib.error.URLError, OSError) as error:
        raise ApiFailure("webhook", 0, f"POST {shown_as}", str(error)) from None


def drain_note(notice: DrainNotice) -> dict[str, Any]:
    """The drain annotation's value."""
    return {"node": notice.node, "reason": notice.reason, "deadline": notice.deadline,
            "pods": list(notice.pods)}


def drain_text(notices: Sequence[DrainNotice]) -> str:
    """The chat message of one drain: where, why and when, then a line per workload (whose,
    which pods)."""
    first = notices[0]
    head = (f"Warden drains node {first.node}: it is faulty "
            f"({first.reason or 'no reason recorded'}); these pods are evicted at "
            f"{first.deadline} (in {first.grace_s:.0f}s):")
    lines = [f"- {n.workload.kind} {n.workload.namespace}/{n.workload.name}"
             f"{f' (owner {n.owner})' if n.owner else ''}: {', '.join(n.pods)}"
             for n in notices]
    return _slack_escaped("\n".join([head, *lines]))


def _slack_escaped(text: str) -> str:
    """Slack reads `&`, `<` and `>` as markup; a reason such as `12 GB/s < 300` must show as
    written (https://api.slack.com/reference/surfaces/formatting#escaping)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def drain_event(notice: DrainNotice, namespace: str, pod: str) -> dict[str, Any]:
    """The Warning Event on one pod of the notice."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    reason = f" ({notice.reason})" if notice.reason else ""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{pod}.warden-", "namespace": namespace},
        "involvedObject": {"kind": "Pod", "namespace": namespace, "name": pod},
        "reason": "WardenDrainScheduled",
        "message": f"node {notice.node} is faulty{reason}; this pod is evicted at "
                   f"{notice.deadline} (in {notice.grace_s:.0f}s)",
        "type": "Warning",
        "source": {"component": "warden"},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
