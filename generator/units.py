"""Kubernetes quantities and human durations, validated once at the model boundary."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def quantity_value(text: str) -> Decimal:
    """The numeric value of a Kubernetes quantity such as `512Gi` or `500m`."""
    from kubernetes.utils import parse_quantity  # lazily: importing kubernetes slows `gkr --help`

    return parse_quantity(text)


def _check_quantity(value: str) -> str:
    try:
        amount = quantity_value(value)
    except ValueError:
        raise ValueError(
            f"{value!r} is not a Kubernetes quantity; use e.g. 512Gi, 64G or 1.5Ti"
        ) from None
    if amount <= 0:
        raise ValueError(f"{value!r} must be positive")
    return value


def _check_cpus(value: object) -> object:
    # A CPU count may be written as a number (8, 0.5) or a quantity string ("500m").
    if isinstance(value, str):
        return float(quantity_value(_check_quantity(value)))
    return value


def parse_duration(text: str) -> int:
    """Seconds in a duration written as `3d`, `12h`, `1h30m` or `90s`."""
    match = _DURATION.match(text.strip()) if text.strip() else None
    if not match:
        raise ValueError(f"{text!r} is not a duration; use e.g. 90s, 30m, 12h, 3d or 1h30m")
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total <= 0:
        raise ValueError(f"{text!r} must be longer than zero")
    return total


def _check_duration(value: str) -> str:
    parse_duration(value)
    return value


Quantity = Annotated[str, AfterValidator(_check_quantity)]
Duration = Annotated[str, AfterValidator(_check_duration)]
CpuCount = Annotated[float, BeforeValidator(_check_cpus)]


def format_cpus(cpus: float) -> str | int:
    """Kubernetes CPU quantity: whole cores as an int, fractions in millicores."""
    return int(cpus) if float(cpus).is_integer() else f"{round(cpus * 1000)}m"
