"""The fields of DiLoCo's messages (runtime.diloco.link), checked after the wire decoder
(runtime.aux.wire) has checked the frames: what a peer sends is used only once each field
has the type and range this module names, so that no message can end a learner or the
synchroniser (an infinite or huge round, a name that is no string, weights that are no flat
float tensor). Every failure is a WireError naming the field and what is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from runtime.aux.errors import WireError

MAX_NAME = 256  # characters of a learner's name
MAX_ROUND = (1 << 63) - 1  # rounds are int64 where ranks share them (learner._share)


def learner_name(body: Mapping[str, Any]) -> str:
    name = body.get("learner")
    if type(name) is not str or not 0 < len(name) <= MAX_NAME:
        raise WireError(f"field 'learner' must be a name of 1 to {MAX_NAME} characters")
    return name


def round_number(body: Mapping[str, Any]) -> int:
    value = body.get("round", 0)
    if type(value) is not int or not 0 <= value <= MAX_ROUND:
        raise WireError(f"field 'round' must be an integer in 0..{MAX_ROUND}, got "
                        f"{str(value)[:40]}")
    return value


def flag(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if type(value) is not bool:
        raise WireError(f"field {name!r} must be true or false")
    return value


def weights(body: Mapping[str, Any]) -> torch.Tensor | None:
    """The flat weights a message carries, if any: one 1-D floating-point tensor."""
    value = body.get("weights")
    if value is None:
        return None
    if not isinstance(value, torch.Tensor) or value.dim() != 1 \
            or not value.dtype.is_floating_point:
        raise WireError("field 'weights' must be one flat floating-point tensor")
    return value
