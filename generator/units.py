"""Kubernetes quantities and human durations, validated once at the model boundary by the
rules the API server applies, so that nothing gkr accepts is refused at apply time."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

# The quantity grammar of k8s.io/apimachinery/pkg/api/resource (quantity.go, and suffix.go
# for the suffixes it accepts): <signedNumber><suffix>, where a number is 1, 1.5, 1. or .5
# in ASCII digits, and the suffix is binary SI (Ki…Ei), decimal SI (n, u, m, "", k…E) or an
# exponent (e3, E-2) — one suffix only, so `1e3Gi` is refused, and no spaces anywhere.
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE](?P<exponent>[+-]?[0-9]+))?",
    re.ASCII,
)
_BINARY = {f"{p}i": 1024 ** (i + 1) for i, p in enumerate("KMGTPE")}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
MAX_EXPONENT = 64  # far beyond any resource; keeps Decimal arithmetic finite

_DURATION = re.compile(r"(?:([0-9]{1,9})d)?(?:([0-9]{1,9})h)?(?:([0-9]{1,9})m)?(?:([0-9]{1,9})s)?",
                       re.ASCII)
# Durations end up in int32 fields: a RayJob's activeDeadlineSeconds and
# ttlSecondsAfterFinished (KubeRay rayjob_types.go), a Job's ttlSecondsAfterFinished
# (k8s.io/api batch/v1), and Warden's reservation seconds. One bound for all of them.
INT32_MAX = 2**31 - 1
MILLI = Decimal("0.001")  # "Kubernetes does not allow CPU precision finer than 1m" (k8s docs,
# "Resource units in Kubernetes")


def quantity_value(text: str) -> Decimal:
    """The numeric value of a Kubernetes quantity such as `512Gi` or `500m`."""
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a Kubernetes quantity; use e.g. 512Gi, 64G or 1.5Ti")
    number, suffix = Decimal(match["number"]), match["suffix"] or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    exponent = int(match["exponent"]) if match["exponent"] else _DECIMAL.get(suffix, 0)
    if abs(exponent) > MAX_EXPONENT:
        raise ValueError(f"{text!r}: an exponent beyond ±{MAX_EXPONENT} is not a resource amount")
    return number.scaleb(exponent)


def _check_quantity(value: str) -> str:
    if quantity_value(value) <= 0:
        raise ValueError(f"{value!r} must be positive")
    return value


def _check_cpus(value: object) -> object:
    # A CPU count may be written as a number (8, 0.5) or a quantity string ("500m").
    if isinstance(value, str):
        return float(quantity_value(_check_quantity(value)))
    return value


def _whole_millicores(value: float) -> float:
    amount = Decimal(repr(value))
    if not amount.is_finite():
        raise ValueError(f"{value} is not a number of CPUs")
    if amount % MILLI:
        raise ValueError(f"{value:g} CPUs is finer than 1m (0.001 CPU), the smallest amount "
                         "Kubernetes accepts")
    return value


def parse_duration(text: str) -> int:
    """Seconds in a duration written as `3d`, `12h`, `1h30m` or `90s`."""
    match = _DURATION.fullmatch(text) if text else None
    if not match:
        raise ValueError(f"{text!r} is not a duration; use e.g. 90s, 30m, 12h, 3d or 1h30m")
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total <= 0:
        raise ValueError(f"{text!r} must be longer than zero")
    if total > INT32_MAX:
        raise ValueError(f"{text!r} is {total} s; Kubernetes takes at most {INT32_MAX} s "
                         "(about 68 years, an int32)")
    return total


def _check_duration(value: str) -> str:
    parse_duration(value)
    return value


Quantity = Annotated[str, AfterValidator(_check_quantity)]
Duration = Annotated[str, AfterValidator(_check_duration)]
# json_schema_input_type: `gkr schema` says what a file may hold, a number or a quantity.
CpuCount = Annotated[float, BeforeValidator(_check_cpus, json_schema_input_type=float | str),
                     AfterValidator(_whole_millicores)]


def format_cpus(cpus: float) -> str | int:
    """Kubernetes CPU quantity: whole cores as an int, fractions in millicores."""
    return int(cpus) if float(cpus).is_integer() else f"{round(cpus * 1000)}m"
