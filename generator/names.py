"""Kubernetes' syntax for names, label keys and values, annotations and environment
variables, with the API server's own rules (k8s.io/apimachinery/pkg/util/validation,
validation.go, and pkg/api/validation/objectmeta.go for annotations). Each check returns why
a value is refused, or None; callers attach the file, line and field.

Patterns are matched whole (`fullmatch`): with `re.match`, `$` would accept a final newline.
"""

from __future__ import annotations

import json
import re
from typing import Any

DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # IsDNS1035Label
DNS_1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_1123_SUBDOMAIN = re.compile(rf"{DNS_1123_LABEL}(\.{DNS_1123_LABEL})*")  # IsDNS1123Subdomain
# IsCIdentifier: the portable subset of IsEnvVarName, so that a shell can read every variable.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
NAME_MAX = 63  # a DNS-1123 label, a qualified name, a label value
SUBDOMAIN_MAX = 253  # a DNS-1123 subdomain, e.g. a label key's prefix
ANNOTATIONS_MAX = 256 * 1024  # TotalAnnotationSizeLimitB: keys and values of one object
RESERVED_ENV_PREFIX = "GKR_"  # runtime.identity.Env: set by GKR in every pod
# The largest object the API server can store: etcd's default --max-request-bytes (1.5 MiB);
# the API server itself refuses request bodies over 3 MiB.
OBJECT_MAX = 1536 * 1024


def qualified_name_problem(key: str) -> str | None:
    """IsQualifiedName, the syntax of label and annotation keys: [prefix/]name, the prefix a
    DNS-1123 subdomain of at most 253 characters, the name at most 63."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (DNS_1123_SUBDOMAIN.fullmatch(prefix) and len(prefix) <= SUBDOMAIN_MAX):
        return (f"{key!r}: the prefix must be a DNS subdomain of at most {SUBDOMAIN_MAX} "
                "characters (lower-case letters, digits, '-' and '.')")
    if not QUALIFIED_NAME.fullmatch(name) or len(name) > NAME_MAX:
        return (f"{key!r} is not a valid key: [prefix/]name, the name at most {NAME_MAX} of "
                "[-A-Za-z0-9_.], starting and ending with a letter or digit")
    return None


def label_value_problem(value: object) -> str | None:
    """IsValidLabelValue."""
    if isinstance(value, str) and LABEL_VALUE.fullmatch(value) and len(value) <= NAME_MAX:
        return None
    return (f"{value!r} is not a valid label value: at most {NAME_MAX} of [-A-Za-z0-9_.], "
            "starting and ending with a letter or digit")


def annotations_problem(annotations: dict[str, object]) -> str | None:
    """ValidateAnnotations: valid keys, and keys and values together within 256 KiB."""
    for key in annotations:
        if (problem := qualified_name_problem(str(key))) is not None:
            return f"annotation {problem}"
    size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
    if size > ANNOTATIONS_MAX:
        return f"annotations total {size} bytes; Kubernetes allows {ANNOTATIONS_MAX}"
    return None


def env_name_problem(name: object) -> str | None:
    """Why `name` cannot be an environment variable of a GKR pod (None: it can)."""
    if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
        return (f"{name!r} is not a valid variable name: letters, digits and '_', not "
                "starting with a digit")
    if name.startswith(RESERVED_ENV_PREFIX):
        return f"{RESERVED_ENV_PREFIX}* variables are set by GKR"
    return None


def env_value_problem(value: object) -> str | None:
    if not isinstance(value, str):
        return f"{value!r} is not a string; quote it"
    if "\0" in value:
        return "a NUL character cannot be part of an environment value"
    return None


def object_size_problem(document: dict[str, Any]) -> str | None:
    """An object must fit in one etcd request, as JSON (what kubectl and Argo CD send)."""
    size = len(json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode())
    if size <= OBJECT_MAX:
        return None
    return (f"{size} bytes as JSON; Kubernetes stores at most {OBJECT_MAX} per object "
            "(etcd's request limit): shorten env values, labels or cmd")
