"""The reservation keeper: one sweep tracks, reserves and releases (reservations.py decides).

A sweep reads every node, every RayJob and every RayJob worker pod once, then patches only
nodes whose state should change, each patch guarded by the node's `resourceVersion`. A node
that changed meanwhile (409) or vanished (404) is skipped; the next sweep decides again, so
a sweep cut short anywhere is simply repeated. Nodes Warden cordoned for a fault are never
touched: their recovery owns them.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field

from runtime.kube import Conflict, NotFound
from runtime.warden import memory
from runtime.warden import reservations as rsv
from runtime.warden.config import ReservationConfig
from runtime.warden.interfaces import Cluster, Json
from runtime.warden.model import ReservationSweep

log = logging.getLogger(__name__)
_DONE = {"Succeeded", "Failed"}


@dataclass
class Snapshot:
    """What one sweep read: nodes by name, RayJobs by ref, worker pods by job ref."""

    nodes: dict[str, Json]
    jobs: dict[str, Json]
    workers: dict[str, list[Json]] = field(default_factory=dict)

    def running_on(self) -> dict[str, set[str]]:
        """Annotated, unfinished jobs with a scheduled, live worker: job refs by node."""
        found: dict[str, set[str]] = defaultdict(set)
        for job, pods in self.workers.items():
            rayjob = self.jobs.get(job)
            if rayjob is None or rsv.finished(rayjob) or rsv.requested_seconds(rayjob) is None:
                continue
            for pod in pods:
                node = pod.get("spec", {}).get("nodeName")
                if node and pod.get("status", {}).get("phase") not in _DONE:
                    found[node].add(job)
        return found


class ReservationKeeper:
    """Tracks the nodes of annotated RayJobs, reserves them when the job ends, releases them."""

    def __init__(self, config: ReservationConfig, cluster: Cluster) -> None:
        self.config, self.cluster = config, cluster

    def sweep(self, now: float) -> ReservationSweep:
        """One pass over the cluster; what changed, as `node: detail` lines."""
        if not self.config.enabled:
            return ReservationSweep()
        seen = self._read()
        return ReservationSweep(
            tracked=self._track(seen), reserved=self._reserve(seen, now),
            released=self._release(seen, now),
        )

    def _read(self) -> Snapshot:
        nodes = {n["metadata"]["name"]: n for n in self.cluster.list_nodes("")}
        jobs = {rsv.ref(j): j for j in self.cluster.list_rayjobs()}
        seen = Snapshot(nodes, jobs)
        for pod in self.cluster.list_pods(rsv.WORKER_SELECTOR):
            labels = pod["metadata"].get("labels") or {}
            job = f"{pod['metadata']['namespace']}/{labels.get(rsv.JOB_LABEL, '')}"
            seen.workers.setdefault(job, []).append(pod)
        return seen

    def _open(self, seen: Snapshot, name: str) -> Json | None:
        """The node if the keeper may act on it: it exists and no fault cordon holds it."""
        node = seen.nodes.get(name)
        return None if node is None or memory.cordoned_by_warden(node) else node

    def _track(self, seen: Snapshot) -> list[str]:
        done = []
        for name, jobs in sorted(seen.running_on().items()):
            node = self._open(seen, name)
            if node is None:
                continue
            current = rsv.notes(node).get(rsv.TRACKED_JOB)
            job = current if current in jobs else min(jobs)  # keep a claim while it runs
            seconds = rsv.requested_seconds(seen.jobs[job]) or 0
            patch = rsv.track_patch(node, job, seconds)
            if patch is not None and self._patch(seen, name, patch):
                done.append(f"{name}: {job}")
        return done

    def _reserve(self, seen: Snapshot, now: float) -> list[str]:
        done = []
        for name in sorted(seen.nodes):
            node = self._open(seen, name)
            job = rsv.notes(node).get(rsv.TRACKED_JOB) if node else None
            if node is None or not job or not self._ended(seen, job):
                continue
            seconds = self._seconds(seen, node, job)
            if seconds is None or self._claimed(node, job, now):
                self._patch(seen, name, rsv.untrack_patch(node))
                continue
            until = now + seconds
            if self._patch(seen, name, rsv.reserve_patch(node, self.config.taint_key, until)):
                done.append(f"{name}: {job} until {rsv.stamp(until)}")
        return done

    def _ended(self, seen: Snapshot, job: str) -> bool:
        """Finished (or deleted) and none of its worker pods is left."""
        rayjob = seen.jobs.get(job)
        return (rayjob is None or rsv.finished(rayjob)) and not seen.workers.get(job)

    def _seconds(self, seen: Snapshot, node: Json, job: str) -> float | None:
        """The job's request (its own annotation if it still exists), capped; None: none."""
        rayjob = seen.jobs.get(job)
        if rayjob is not None:
            asked = rsv.requested_seconds(rayjob)
        else:
            raw = rsv.notes(node).get(rsv.TRACKED_SECONDS, "")
            asked = int(raw) if raw.isdigit() and int(raw) > 0 else None
        return None if asked is None else min(float(asked), self.config.max_reservation_s)

    def _claimed(self, node: Json, job: str, now: float) -> bool:
        """Another claim holds the node: a reservation taint not Warden's, or another
        namespace's live reservation."""
        if rsv.foreign_reservation(node, self.config.taint_key):
            return True
        held = rsv.reservation(node)
        namespace = job.split("/", 1)[0]
        return held is not None and held.namespace != namespace and not rsv.expired(held, now)

    def _release(self, seen: Snapshot, now: float) -> list[str]:
        done = []
        for name in sorted(seen.nodes):
            node = self._open(seen, name)
            held = rsv.reservation(node) if node else None
            if node is None or held is None or not rsv.expired(held, now):
                continue
            if self._patch(seen, name, rsv.release_patch(node, self.config.taint_key)):
                done.append(f"{name}: {held.by}")
        return done

    def _patch(self, seen: Snapshot, name: str, patch: Json) -> bool:
        """Apply a guarded patch; a node that changed or vanished meanwhile waits a sweep."""
        try:
            seen.nodes[name] = self.cluster.patch_node(name, patch)
        except (NotFound, Conflict) as error:
            log.info("reservation keeper: %s changed meanwhile (%d); next sweep", name,
                     error.status)
            return False
        return True
