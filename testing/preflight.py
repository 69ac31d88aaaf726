"""Worker "pods" of the preflight gate as processes of this machine.

Each pod is a `python -m runtime.preflight.pod` process with an environment of its own (its
node and pod names, NCCL variables, an injected fault), and the ranks meet over real TCP on
127.0.0.1 with gloo: the gate's placement is the only part played (Ray would pin one actor
per pod; a local Ray has one node). `replace` plays KubeRay recreating a deleted pod.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field

from runtime.identity import Env
from runtime.preflight.result import GateRecord
from runtime.preflight.tasks import PodOutcome, PodSlot, PodsMissing, PodTask
from testing.ray import ROOT


@dataclass(frozen=True)
class FakePod:
    """One pod: its names and what its environment adds."""

    pod: str
    node: str
    env: dict[str, str] = field(default_factory=dict)


class ProcessPods:
    """The gate's `Pods` over local processes, in the order given."""

    def __init__(self, pods: list[FakePod]) -> None:
        self.pods = list(pods)
        self.ran: list[list[str]] = []  # the pods of each attempt

    def wait(self, count: int, timeout_s: float, avoid: set[str]) -> list[PodSlot]:
        slots = [PodSlot(node=p.node, pod=p.pod, address="127.0.0.1", key=p.pod)
                 for p in self.pods if p.pod not in avoid]
        if len(slots) < count:
            raise PodsMissing(f"{len(slots)} of {count} worker pods joined in {timeout_s:g} s")
        return slots[:count]

    def free_port(self, slot: PodSlot) -> int:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            return int(probe.getsockname()[1])

    def run(self, tasks: list[PodTask], slots: list[PodSlot],
            timeout_s: float) -> list[PodOutcome | None]:
        self.ran.append([s.pod for s in slots])
        by_name = {p.pod: p for p in self.pods}
        started = [self._start(by_name[s.pod], t) for t, s in zip(tasks, slots, strict=True)]
        return [self._finish(process, timeout_s) for process in started]

    def _start(self, pod: FakePod, task: PodTask) -> subprocess.Popen[str]:
        env = {**os.environ, "PYTHONPATH": str(ROOT), Env.NODE: pod.node, Env.POD: pod.pod,
               **pod.env}
        process = subprocess.Popen([sys.executable, "-m", "runtime.preflight.pod"],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                   env=env, cwd=ROOT)
        assert process.stdin is not None
        process.stdin.write(task.model_dump_json())
        process.stdin.close()
        return process

    @staticmethod
    def _finish(process: subprocess.Popen[str], timeout_s: float) -> PodOutcome | None:
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            return None
        assert process.stdout is not None
        lines = process.stdout.read().splitlines()
        return PodOutcome.model_validate_json(lines[-1]) if lines else None

    def replace(self, name: str, new: FakePod) -> None:
        """KubeRay's part: pod `name` is deleted and `new` takes its place."""
        self.pods = [new if p.pod == name else p for p in self.pods]


class RecordingReporter:
    """Keeps every record; replaces pods through `replacements` (old name -> new pod)."""

    def __init__(self, pods: ProcessPods | None = None,
                 replacements: dict[str, FakePod] | None = None) -> None:
        self.pods, self.replacements = pods, replacements or {}
        self.records: list[GateRecord] = []
        self.asked: list[list[str]] = []
        self.can_replace = pods is not None

    def record(self, record: GateRecord) -> None:
        self.records.append(record)

    def replace(self, group: str, pods: list[str], attempt: int) -> bool:
        self.asked.append(pods)
        if self.pods is None or not all(p in self.replacements for p in pods):
            return False
        for name in pods:
            self.pods.replace(name, self.replacements[name])
        return True
