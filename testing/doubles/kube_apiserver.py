"""A TEST DOUBLE of the Kubernetes API server: no real API server can run on these machines.

One double serves every suite that talks to Kubernetes (`gkr`'s cluster commands, Warden). It
is a real HTTP server on loopback (kube_http.py) that real clients reach through a real
kubeconfig: the `kubernetes` package (typed and dynamic clients) and kubectl v1.37
(test_kubectl.py). It answers the subset of the API those clients use as the real server does
(https://kubernetes.io/docs/reference/using-api/):

* what clients read before they act: `/version`; discovery, aggregated (apidiscovery v2, when
  the Accept header asks, as kubectl does) or legacy (`/api`, `/apis`, `/apis/<group>`, each
  group version's APIResourceList), kube_discovery.py; the OpenAPI v3 index and per group
  version documents, with the kinds' schemas, kube_openapi.py and kube_schema.py;
* the resources of `kube_api.SERVED` (every kind the project renders, and Node, Pod, Event,
  Workload), namespaced and cluster-scoped, at every version their group serves; lists
  across all namespaces (`/api/v1/pods`); resourceVersion, uid, creationTimestamp and
  generation kept;
* create (POST, `generateName` too), get, list and watch with label selectors (equality, set
  and existence terms) and the field selectors each kind registers (400 for any other field),
  replace (PUT, `resourceVersion` as a precondition), delete; every write as a server-side
  dry run too (`dryRun=All`: checked and answered, not stored); a namespace gets its name
  label, the `kubernetes` finalizer and phase Active;
* request bodies in JSON, YAML for apply, and protobuf for the few kinds kubectl's typed
  clients send so (kube_protobuf.py); answers in JSON, or as a `Table` when the Accept
  header asks (kube_table.py: NAME and AGE columns only);
* field validation (`fieldValidation`: Strict is kubectl's default, Warn the server's):
  fields a kind's schema lacks are refused with the server's messages (400 `strict decoding
  error`), or dropped with a `Warning` header;
* PATCH as JSON merge patch, strategic merge patch (built-in kinds; 415 for custom resources,
  as the real server) and JSON patch (kube_patch.py); a `metadata.resourceVersion` the patch
  sets is a precondition (409 Conflict when stale);
* server-side apply (kube_fields.py): `application/apply-patch+yaml`, `fieldManager` required
  (400 otherwise), managedFields per manager and operation, the server's 409 Conflict
  message and causes when another manager owns a field with another value unless
  `force=true`, fields no longer applied removed; an apply of a field the schema lacks fails
  as on the server (500, `failed to create typed patch object`);
* the status subresource's rule: creating, patching or applying the main resource leaves
  `status` as it was; only controllers (the tests, through `put`) write it;
* `pods/eviction` (policy/v1 Eviction): the pod is deleted at once, since no PodDisruptionBudget
  and no kubelet run here to make the deletion graceful;
* watch (`?watch=true`): a chunked stream of ADDED/MODIFIED/DELETED after a resourceVersion,
  closed after `timeoutSeconds`; pod logs (`/log`: `container`, `follow`, `tailLines`);
* failures as `Status` bodies with the real codes and reasons (404 NotFound, 405
  MethodNotAllowed, 409 AlreadyExists and Conflict, 422 Invalid, 400 BadRequest,
  415 UnsupportedMediaType).

Where it differs from a real server (tests rely on none of these being real):
* no authentication, admission, defaulting (beyond namespaces) or validation beyond names
  and unknown fields; namespaces need not exist, and deleting one deletes nothing else;
* no conversion between versions: an object reads back in the version it was written in;
* deletion is immediate (no graceful deletion, finalizers or garbage collection);
* a watch from resourceVersion 0 (or none) replays every recorded change, where a server
  sends the current objects as ADDED; the `timeout` parameter does not end a watch;
* protobuf is decoded only for Namespace, ConfigMap and ServiceAccount (415 otherwise) and
  never answered; `/openapi/v2`, `deletecollection` and the `status` and `scale`
  subresources' paths are not served;
* server-side apply treats lists as atomic (a server merges `map` and `set` lists by key)
  and does not track the managers of `put`, the tests' controller writes.

Every request is recorded in `requests`. Tests play the controllers and kubelets: they write
objects with `put` and `delete`, feed logs with `set_log`, and react to what clients did
through `history` and `wait_changes`.
"""

from __future__ import annotations

import copy
import random
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path

import yaml

from testing.doubles import kube_fields as fields
from testing.doubles.kube_api import (
    SERVED,
    ApiError,
    Change,
    Json,
    Key,
    bad_request,
    field_terms,
    fields_match,
    label_selected,
    not_found,
    resource_name,
    validate,
)
from testing.doubles.kube_http import Request, make_handler
from testing.doubles.kube_patch import merge_patch

# The alphabet of generateName suffixes (k8s.io/apimachinery/pkg/util/rand: no vowels).
_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"
EVICTION_VERSIONS = ("policy/v1", "policy/v1beta1")


class KubeApiServer:
    """The double, serving from construction; use as a context manager or call `close()`."""

    def __init__(self) -> None:
        self.store: dict[Key, Json] = {}
        self.owners: dict[Key, fields.Managers] = {}
        self.changes: list[Change] = []
        self.logs: dict[tuple[str, str, str], list[str]] = {}
        self.open_logs: set[tuple[str, str, str]] = set()
        self.requests: list[Request] = []
        self.version = 0
        self.closed = False
        self.changed = threading.Condition()
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(self))
        self.http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        # A short poll interval: `close()` waits one for the serving thread to stop.
        threading.Thread(target=self.http.serve_forever, args=(0.05,), daemon=True).start()

    def __enter__(self) -> KubeApiServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        with self.changed:
            self.closed = True
            self.open_logs.clear()
            self.changed.notify_all()
        self.http.shutdown()
        self.http.server_close()

    def write_kubeconfig(self, path: Path, context: str = "double") -> Path:
        """A kubeconfig whose context points a real client at this double (bearer token)."""
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": context,
            "clusters": [{"name": "double", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "test-token"}}],
            "contexts": [{"name": context, "context": {"cluster": "double", "user": "tester"}}],
        }))
        return path

    # ---- what tests do, as controllers and kubelets --------------------------------------
    def put(self, obj: Json) -> Json:
        """Create or replace an object, status included, as a controller would."""
        group = obj["apiVersion"].rpartition("/")[0]
        plural = next(p for (g, p), r in SERVED.items() if g == group and r.kind == obj["kind"])
        meta = obj["metadata"]
        key = (group, plural, meta.get("namespace", ""), meta["name"])
        with self.changed:
            old = self.store.get(key)
            return copy.deepcopy(self._save(key, copy.deepcopy(obj), old))

    def get(self, group: str, plural: str, namespace: str, name: str) -> Json | None:
        with self.changed:
            return copy.deepcopy(self.store.get((group, plural, namespace, name)))

    def objects(self, group: str, plural: str, namespace: str | None = None) -> list[Json]:
        """The stored objects of a resource (in one namespace when given), by key."""
        with self.changed:
            return [copy.deepcopy(obj) for (g, p, ns, _), obj in sorted(self.store.items())
                    if (g, p) == (group, plural) and namespace in (None, ns)]

    def delete(self, group: str, plural: str, namespace: str, name: str) -> Json:
        """Remove an object, as its controller or a garbage collector would."""
        return copy.deepcopy(self.remove((group, plural, namespace, name)))

    def history(self, group: str, plural: str) -> list[Change]:
        with self.changed:
            return [c for c in self.changes if c.resource == (group, plural)]

    def wait_changes(self, after: int, resource: tuple[str, str], timeout: float) -> list[Change]:
        """The changes of a resource after a version, waiting up to `timeout` for one."""
        def found() -> list[Change]:
            return [c for c in self.changes if c.version > after and c.resource == resource]

        with self.changed:
            self.changed.wait_for(lambda: self.closed or found(), timeout)
            return found()

    def requests_to(self, method: str, path: str) -> list[Request]:
        return [r for r in list(self.requests) if (r.method, r.path) == (method, path)]

    def set_log(self, namespace: str, pod: str, container: str, text: str,
                follow: bool = False) -> None:
        with self.changed:
            self.logs[(namespace, pod, container)] = text.splitlines(keepends=True)
            if follow:
                self.open_logs.add((namespace, pod, container))
            self.changed.notify_all()

    def append_log(self, namespace: str, pod: str, container: str, text: str,
                   end: bool = False) -> None:
        with self.changed:
            self.logs[(namespace, pod, container)] += text.splitlines(keepends=True)
            if end:
                self.open_logs.discard((namespace, pod, container))
            self.changed.notify_all()

    # ---- the API verbs (kube_http.py calls these) ----------------------------------------
    def read(self, key: Key) -> Json:
        with self.changed:
            if key not in self.store:
                raise not_found(key)
            return copy.deepcopy(self.store[key])

    def select(self, key: Key, labels: str | None, fields: str | None) -> tuple[list[Json], int]:
        """List: the objects of the key's resource and namespace ("" is all) that match."""
        terms = field_terms(SERVED[key[:2]], fields)
        with self.changed:
            items = [copy.deepcopy(obj) for k, obj in sorted(self.store.items())
                     if k[:2] == key[:2] and key[2] in ("", k[2])
                     and label_selected(obj, labels) and fields_match(obj, terms)]
            return items, self.version

    def create(self, key: Key, body: Json, version: str, manager: str = "",
               dry: bool = False) -> Json:
        """POST: the name comes from the body (or its generateName); 409 when taken."""
        meta = body.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choices(_SUFFIX, k=5))
        full = (*key[:3], meta.get("name", ""))
        validate(full, body, version)
        _keep_status(full, body, None)
        _defaults(full, body, None)
        with self.changed:
            if full in self.store:
                raise ApiError(409, "AlreadyExists",
                               f'{resource_name(*key[:2])} "{full[3]}" already exists',
                               {"name": full[3], "group": key[0], "kind": key[1]})
            self._own(full, manager, body["apiVersion"], None, body, dry)
            return copy.deepcopy(self._save(full, body, None, dry))

    def patch(self, key: Key, change: Callable[[Json], Json], manager: str = "",
              dry: bool = False) -> Json:
        """PATCH: `change` makes the new object from the stored one."""
        with self.changed:
            old = self.store.get(key)
            if old is None:
                raise not_found(key)
            new = change(copy.deepcopy(old))
            self._write(key, new, old, manager, dry)
            return copy.deepcopy(self._save(key, new, old, dry))

    def replace(self, key: Key, body: Json, version: str, manager: str = "",
                dry: bool = False) -> Json:
        """PUT: the whole object; a `metadata.resourceVersion` it carries must be current."""
        validate(key, body, version)
        with self.changed:
            old = self.store.get(key)
            if old is None:
                raise not_found(key)
            body["metadata"].setdefault("resourceVersion", old["metadata"]["resourceVersion"])
            self._write(key, body, old, manager, dry)
            return copy.deepcopy(self._save(key, body, old, dry))

    def _write(self, key: Key, new: Json, old: Json, manager: str, dry: bool) -> None:
        """What an update of a stored object is checked and given (under the lock)."""
        if new.get("metadata", {}).get("resourceVersion") != old["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", f"Operation cannot be fulfilled on "
                           f'{resource_name(*key[:2])} "{key[3]}": the object has been '
                           "modified; please apply your changes to the latest version and "
                           "try again", {"name": key[3], "group": key[0], "kind": key[1]})
        _keep_status(key, new, old)
        _defaults(key, new, old)
        self._own(key, manager, new.get("apiVersion", ""), old, new, dry)

    def apply(self, key: Key, body: Json, manager: str, force: bool,
              dry: bool = False) -> tuple[Json, bool]:
        """Server-side apply: (object, created)."""
        _keep_status(key, body, None)
        with self.changed:
            old = self.store.get(key)
            managers = self._managers(key, dry)
            gone = fields.apply(managers, manager, body["apiVersion"], old or {}, body, force)
            merged = merge_patch(old or {}, body)
            for path in gone:
                fields.remove(merged, path)
            merged["metadata"]["managedFields"] = fields.entries(managers)
            _keep_status(key, merged, old)
            _defaults(key, merged, old)
            return copy.deepcopy(self._save(key, merged, old, dry)), old is None

    def _managers(self, key: Key, dry: bool) -> fields.Managers:
        """A key's field managers; a copy for a dry run, which must change nothing."""
        if dry:
            return copy.deepcopy(self.owners.get(key, {}))
        return self.owners.setdefault(key, {})

    def _own(self, key: Key, manager: str, api_version: str, old: Json | None,
             new: Json, dry: bool) -> None:
        """Record an update's manager (none: a controller's write, as `put` makes)."""
        managers = self._managers(key, dry)
        if manager:
            fields.update(managers, manager, api_version, old, new)
        new.setdefault("metadata", {})["managedFields"] = fields.entries(managers)
        if not managers:
            new["metadata"].pop("managedFields")

    def evict(self, key: Key, body: Json) -> None:
        """The eviction subresource of a pod (policy/v1 Eviction)."""
        if body.get("kind") != "Eviction" or body.get("apiVersion") not in EVICTION_VERSIONS:
            raise bad_request(f"the API version in the data ({body.get('apiVersion')}) does "
                              "not match the expected API version (policy/v1) or kind "
                              "(Eviction)")
        if (body.get("metadata") or {}).get("name") != key[3]:
            raise bad_request("name in URL does not match name in Eviction object")
        self.remove(key)

    def remove(self, key: Key, dry: bool = False) -> Json:
        with self.changed:
            if key not in self.store:
                raise not_found(key)
            if dry:
                return copy.deepcopy(self.store[key])
            obj = self.store.pop(key)
            self.owners.pop(key, None)
            self._record(key, "DELETED", obj)
            return obj

    def pod_log(self, key: Key, container: str | None) -> tuple[tuple[str, str, str], list[str]]:
        """The log of a pod's container (named, or the only one): its key and lines so far."""
        with self.changed:
            if key not in self.store:
                raise not_found(key)
            containers = [c["name"] for c in self.store[key]["spec"]["containers"]]
            if container is None and len(containers) > 1:
                raise bad_request(f"a container name must be specified for pod {key[3]}, "
                                  f"choose one of: [{' '.join(containers)}]")
            log_key = (key[2], key[3], container or containers[0])
            return log_key, list(self.logs.get(log_key, []))

    def wait_log(self, log_key: tuple[str, str, str], sent: int,
                 timeout: float) -> tuple[list[str], bool]:
        """Lines after the first `sent`, waiting up to `timeout`; and whether the log ended."""
        def progressed() -> bool:
            return len(self.logs.get(log_key, [])) != sent or log_key not in self.open_logs

        with self.changed:
            self.changed.wait_for(progressed, timeout)
            return self.logs.get(log_key, [])[sent:], log_key not in self.open_logs

    # ---- storage ---------------------------------------------------------------------------
    def _save(self, key: Key, obj: Json, old: Json | None, dry: bool = False) -> Json:
        """Store (under the lock) with fresh metadata and record the change; a dry run only
        fills the metadata in."""
        meta = obj.setdefault("metadata", {})
        previous = (old or {}).get("metadata", {})
        meta["uid"] = previous.get("uid") or meta.get("uid") or str(uuid.uuid4())
        meta["creationTimestamp"] = previous.get("creationTimestamp") or datetime.now(
            UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        meta["resourceVersion"] = str(self.version + 1)
        spec_changed = old is None or old.get("spec") != obj.get("spec")
        meta["generation"] = previous.get("generation", 0) + (1 if spec_changed else 0)
        if dry:
            return obj
        self.store[key] = obj
        self._record(key, "MODIFIED" if old else "ADDED", obj)
        return obj

    def _record(self, key: Key, kind: str, obj: Json) -> None:
        self.version += 1
        self.changes.append(Change(self.version, kind, key[:2], copy.deepcopy(obj)))
        self.changed.notify_all()


def _defaults(key: Key, obj: Json, old: Json | None) -> None:
    """What the server sets on its own: a namespace's name label, finalizer and phase."""
    if key[:2] != ("", "namespaces"):
        return
    obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = key[3]
    if old is None:
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}


def _keep_status(key: Key, obj: Json, old: Json | None) -> None:
    """The status subresource's rule: writes to the main resource leave `status` as it was."""
    if not SERVED[key[:2]].status:
        return
    obj.pop("status", None)
    if old is not None and "status" in old:
        obj["status"] = copy.deepcopy(old["status"])
