"""Protobuf request bodies, decoded to JSON objects, for the kinds kubectl sends them for.

kubectl v1.37's typed clients send built-in kinds as `application/vnd.kubernetes.protobuf`
(`kubectl create namespace|configmap|serviceaccount`), and it does not retry in JSON when a
server refuses. The body is the Kubernetes envelope (https://kubernetes.io/docs/reference/
using-api/api-concepts/#protobuf-encoding): the magic `k8s\\x00`, then a `runtime.Unknown`
whose `typeMeta` names the kind and whose `raw` is the kind's message.

The double decodes the protobuf wire format (https://protobuf.dev/programming-guides/encoding/)
against the field numbers of the few messages below, taken from the `generated.proto` files of
k8s.io/api (core/v1) and k8s.io/apimachinery (meta/v1, runtime) v0.37. Any other kind, or a
field not listed, is `ProtobufError`: the double answers it 415, where a real server decodes it.
Zero values are dropped, as the JSON form's `omitempty` drops them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, NamedTuple

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"


class ProtobufError(Exception):
    """A body the double cannot decode."""


class Field(NamedTuple):
    """One message field: its JSON name, its type (a scalar's name or a message) and arity."""

    name: str
    type: str | dict[int, Field]
    repeated: bool = False


Message = dict[int, Field]

TIME: Message = {1: Field("seconds", "int"), 2: Field("nanos", "int")}
OWNER_REFERENCE: Message = {
    1: Field("kind", "string"), 3: Field("name", "string"), 4: Field("uid", "string"),
    5: Field("apiVersion", "string"), 6: Field("controller", "bool"),
    7: Field("blockOwnerDeletion", "bool")}
OBJECT_META: Message = {
    1: Field("name", "string"), 2: Field("generateName", "string"),
    3: Field("namespace", "string"), 4: Field("selfLink", "string"), 5: Field("uid", "string"),
    6: Field("resourceVersion", "string"), 7: Field("generation", "int"),
    8: Field("creationTimestamp", "time"), 11: Field("labels", "map"),
    12: Field("annotations", "map"), 13: Field("ownerReferences", OWNER_REFERENCE, True),
    14: Field("finalizers", "string", True)}
LOCAL_REFERENCE: Message = {1: Field("name", "string")}
OBJECT_REFERENCE: Message = {
    1: Field("kind", "string"), 2: Field("namespace", "string"), 3: Field("name", "string"),
    4: Field("uid", "string"), 5: Field("apiVersion", "string"),
    6: Field("resourceVersion", "string"), 7: Field("fieldPath", "string")}
KINDS: dict[tuple[str, str], Message] = {
    ("v1", "Namespace"): {
        1: Field("metadata", OBJECT_META),
        2: Field("spec", {1: Field("finalizers", "string", True)}),
        3: Field("status", {1: Field("phase", "string")})},
    ("v1", "ConfigMap"): {
        1: Field("metadata", OBJECT_META), 2: Field("data", "map"),
        3: Field("binaryData", "bytesmap"), 4: Field("immutable", "bool")},
    ("v1", "ServiceAccount"): {
        1: Field("metadata", OBJECT_META), 2: Field("secrets", OBJECT_REFERENCE, True),
        3: Field("imagePullSecrets", LOCAL_REFERENCE, True),
        4: Field("automountServiceAccountToken", "bool")},
}
UNKNOWN: Message = {  # runtime.Unknown, its typeMeta inlined
    1: Field("typeMeta", {1: Field("apiVersion", "string"), 2: Field("kind", "string")}),
    2: Field("raw", "bytes"), 3: Field("contentEncoding", "string"),
    4: Field("contentType", "string")}


def decode(body: bytes) -> dict[str, Any]:
    """The JSON object a protobuf request body carries."""
    if not body.startswith(MAGIC):
        raise ProtobufError("the body does not start with the Kubernetes protobuf magic")
    envelope = _message(body[len(MAGIC):], UNKNOWN)
    type_meta = envelope.get("typeMeta", {})
    version, kind = type_meta.get("apiVersion", ""), type_meta.get("kind", "")
    schema = KINDS.get((version, kind))
    if schema is None:
        raise ProtobufError(f"the double decodes no protobuf {version} {kind}")
    return {"kind": kind, "apiVersion": version, **_message(envelope.get("raw", b""), schema)}


def _message(data: bytes, schema: Message) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for number, wire, value in _wire(data):
        field = schema.get(number)
        if field is None:
            raise ProtobufError(f"the double does not decode field {number} here")
        decoded = _value(field, wire, value)
        if field.repeated:
            found.setdefault(field.name, []).append(decoded)
        elif isinstance(decoded, tuple):  # a map entry
            found.setdefault(field.name, {})[decoded[0]] = decoded[1]
        else:
            found[field.name] = decoded
    return {k: v for k, v in found.items() if v not in ("", 0, False, {}, [], None)}


def _value(field: Field, wire: int, value: int | bytes) -> Any:
    if isinstance(field.type, dict):
        return _message(_bytes(value), field.type)
    if field.type in ("map", "bytesmap"):
        entry = _message(_bytes(value), {1: Field("key", "string"), 2: Field("value", "raw")})
        raw = entry.get("value", b"")
        return entry.get("key", ""), raw if field.type == "bytesmap" else raw.decode()
    if field.type == "time":
        seconds = _message(_bytes(value), TIME).get("seconds")
        return None if seconds is None else datetime.fromtimestamp(seconds, UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
    return _scalar(field.type, value)


def _scalar(kind: str, value: int | bytes) -> Any:
    if kind in ("string", "bytes", "raw"):
        data = _bytes(value)
        return data.decode() if kind == "string" else data
    if not isinstance(value, int):
        raise ProtobufError("a length-delimited value where a number was expected")
    if kind == "bool":
        return value != 0
    return value - (1 << 64) if value >= 1 << 63 else value  # int64, two's complement


def _bytes(value: int | bytes) -> bytes:
    if not isinstance(value, bytes):
        raise ProtobufError("a number where a length-delimited value was expected")
    return value


def _wire(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """The (field number, wire type, value) records of a message: varints and lengths."""
    records: list[tuple[int, int, int | bytes]] = []
    at = 0
    while at < len(data):
        tag, at = _varint(data, at)
        wire = tag & 7
        if wire == 0:
            value, at = _varint(data, at)
            records.append((tag >> 3, wire, value))
        elif wire == 2:
            size, at = _varint(data, at)
            records.append((tag >> 3, wire, data[at:at + size]))
            at += size
        else:  # fixed32/64 appear in none of the messages above
            raise ProtobufError(f"unexpected protobuf wire type {wire}")
    return records


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise ProtobufError("truncated protobuf varint")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not byte & 0x80:
            return value, at
