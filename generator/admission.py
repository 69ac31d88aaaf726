"""What a pod in a team namespace may do: one rule source for `gkr validate`'s own pod checks
(generator.policies) and the cluster's ValidatingAdmissionPolicy, so that what gkr refuses
client-side the API server refuses too (issue 22, point 9).

Beyond the allowance a pod may not: run a privileged container; share the host's network,
PID or IPC namespace; publish a host port; mount a host path; add a capability; run
Unconfined seccomp or an unmasked /proc; use an image not pinned by digest. The allowance,
from the accelerator catalog, is per accelerator: its host library paths and the node's
telemetry folder (generator.telemetry), and its sidecars (a container of exactly the
catalog's name and image may add exactly the catalog's capabilities).

Why team namespaces cannot simply enforce the `baseline` Pod Security level: baseline
forbids every hostPath volume and every added capability outside its default list
(https://kubernetes.io/docs/concepts/security/pod-security-standards/, "Baseline": HostPath
Volumes, Capabilities), and Pod Security Admission has no per-pod exemption a namespace
label can grant (exemptions are API-server configuration, which GKE does not expose). GPU
pods mount the NVIDIA libraries and the telemetry folder from the host, and the GPUDirect
sidecars add NET_ADMIN. So `team_enforce_level` enforces `baseline` in a cluster whose
accelerators need none of that, and otherwise `privileged`, with this module's
ValidatingAdmissionPolicy bound to the team namespaces in both cases: it holds baseline's
host-namespace, privileged, hostPath, capability, host-port, seccomp and /proc controls with
the catalog's exemptions, and more (pinned images). audit/warn stay at baseline.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from generator.catalog import PINNED_IMAGE, Accelerator

# The capabilities baseline admits (Pod Security Standards, Baseline, "Capabilities").
BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
POLICY_NAME = "gkr-team-pods"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server, immutable


@dataclass(frozen=True)
class Sidecar:
    """A catalog sidecar: the one container that may add `capabilities`."""

    image: str
    capabilities: tuple[str, ...]


@dataclass(frozen=True)
class Allowance:
    """What pods on one accelerator's nodes may do beyond the rules (CPU pods: nothing)."""

    host_paths: tuple[str, ...] = ()
    sidecars: dict[str, Sidecar] = field(default_factory=dict)  # by container name

    @property
    def beyond_baseline(self) -> bool:
        """Whether such pods break the baseline Pod Security level."""
        return bool(self.host_paths) or any(
            set(s.capabilities) - BASELINE_CAPABILITIES for s in self.sidecars.values())


NONE = Allowance()


def allowance(accelerator: Accelerator | None, telemetry_dir: str | None) -> Allowance:
    """The catalog's allowance for pods of `accelerator` (None: a CPU pod)."""
    if accelerator is None:
        return NONE
    paths = [v["hostPath"]["path"] for v in accelerator.volumes if "hostPath" in v]
    sidecars = {s["name"]: Sidecar(s["image"], tuple(
        ((s.get("securityContext") or {}).get("capabilities") or {}).get("add") or []))
        for s in accelerator.sidecars}
    return Allowance(tuple(sorted({*paths, *([telemetry_dir] if telemetry_dir else [])})),
                     sidecars)


def team_enforce_level(allowances: Iterable[Allowance]) -> str:
    """The Pod Security level team namespaces enforce (module docstring: why)."""
    return "privileged" if any(a.beyond_baseline for a in allowances) else "baseline"


# -- the ValidatingAdmissionPolicy ----------------------------------------------------------

def _cel(value: Any) -> str:
    """A CEL literal: JSON strings, lists and maps of strings are CEL syntax as they are."""
    return json.dumps(value, sort_keys=True)


def _all_containers(check: str) -> str:
    """`check` (over `c`) for every container of every list; lists are checked one by one
    because Container and EphemeralContainer are distinct types to the API server's CEL."""
    return " && ".join(
        f"(!has(object.spec.{key}) || object.spec.{key}.all(c, {check}))"
        for key in CONTAINER_LISTS)


def _unset_or(path: str, field_name: str, allowed: str) -> str:
    return f"!has({path}.securityContext) || !has({path}.securityContext.{field_name}) || " \
           f"{allowed}"


def _validations() -> list[dict[str, str]]:
    sidecar = "variables.accelerator + '/' + c.name + '@' + c.image"
    capability = (f"(({sidecar}) in variables.sidecarCapabilities && "
                  f"cap in variables.sidecarCapabilities[{sidecar}])")
    return [
        *({"expression": f"!has(object.spec.{key}) || !object.spec.{key}",
           "message": f"{key} is not allowed in a team namespace"} for key in HOST_NAMESPACES),
        {"expression": _all_containers(_unset_or("c", "privileged",
                                                 "!c.securityContext.privileged")),
         "message": "a container runs privileged; team pods may not"},
        {"expression": "!has(object.spec.volumes) || object.spec.volumes.all(v, "
                       "!has(v.hostPath) || v.hostPath.path in variables.hostPaths)",
         "message": "a volume mounts a host path that neither the accelerator catalog (for the "
                    "pod's gke-accelerator node selector) nor telemetry requires"},
        {"expression": _all_containers(
            "!has(c.securityContext) || !has(c.securityContext.capabilities) || "
            f"!has(c.securityContext.capabilities.add) || "
            f"c.securityContext.capabilities.add.all(cap, {capability})"),
         "message": "a container adds capabilities; only the accelerator catalog's sidecars "
                    "(its name and image) add the catalog's"},
        {"expression": _all_containers(
            "!has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0)"),
         "message": "a container publishes a host port"},
        {"expression": "(" + _unset_or("object.spec", "seccompProfile",
                                       "object.spec.securityContext.seccompProfile.type != "
                                       "'Unconfined'") + ") && " + _all_containers(
            _unset_or("c", "seccompProfile", "c.securityContext.seccompProfile.type != "
                      "'Unconfined'")),
         "message": "seccomp Unconfined is not allowed"},
        {"expression": _all_containers(_unset_or("c", "procMount",
                                                 "c.securityContext.procMount == 'Default'")),
         "message": "an unmasked /proc (procMount) is not allowed"},
        {"expression": _all_containers(
            f"c.image.matches({_cel(PINNED_IMAGE)}) || "
            "((variables.accelerator + '/' + c.name) in variables.sidecarImages && "
            "variables.sidecarImages[variables.accelerator + '/' + c.name] == c.image)"),
         "message": "an image is not pinned: use repository@sha256:<digest> (a catalog "
                    "sidecar may use the catalog's image)"},
    ]


def _variables(accelerator_label: str, allowances: dict[str, Allowance]
               ) -> list[dict[str, str]]:
    """The allowance as CEL literals keyed by the pod's gke-accelerator node selector, which
    the kubelet holds a pod to (a pod naming no accelerator gets nothing)."""
    label = _cel(accelerator_label)
    paths = {accel: list(a.host_paths) for accel, a in allowances.items()}
    images = {f"{accel}/{name}": s.image
              for accel, a in allowances.items() for name, s in a.sidecars.items()}
    capabilities = {f"{accel}/{name}@{s.image}": list(s.capabilities)
                    for accel, a in allowances.items() for name, s in a.sidecars.items()}
    return [
        {"name": "accelerator",
         "expression": f"has(object.spec.nodeSelector) && {label} in object.spec.nodeSelector"
                       f" ? object.spec.nodeSelector[{label}] : ''"},
        {"name": "hostPathsByAccelerator", "expression": _cel(paths)},
        {"name": "hostPaths",
         "expression": "variables.accelerator in variables.hostPathsByAccelerator ? "
                       "variables.hostPathsByAccelerator[variables.accelerator] : []"},
        {"name": "sidecarImages", "expression": _cel(images)},
        {"name": "sidecarCapabilities", "expression": _cel(capabilities)},
    ]


def admission_policy(accelerator_label: str, allowances: dict[str, Allowance],
                     namespaces: list[str]) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding (admissionregistration.k8s.io/v1) for
    one cluster: pods of `namespaces` against `allowances` (by gke-accelerator value)."""
    labels = {"app.kubernetes.io/managed-by": "gkr"}
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": labels},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["pods", "pods/ephemeralcontainers"]}]},
            "variables": _variables(accelerator_label, allowances),
            "validations": [v | {"reason": "Forbidden"} for v in _validations()],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME, "labels": labels},
        "spec": {
            "policyName": POLICY_NAME, "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchExpressions": [{
                "key": NAMESPACE_NAME_LABEL, "operator": "In", "values": sorted(namespaces)}]}},
        },
    }
    return [policy, binding]
