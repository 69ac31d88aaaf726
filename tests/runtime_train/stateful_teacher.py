"""A teacher that counts the requests it served and checkpoints the count: an auxiliary
service with state of its own, loaded by the aux workers as
`tests.runtime_train.stateful_teacher:CountingEncoder`."""

from __future__ import annotations

import json
from pathlib import Path

from runtime.aux.services import EncoderService, Payload


class CountingEncoder(EncoderService):
    """EncoderService plus a count of `encode` requests that survives a resume."""

    def __init__(self, **options: int) -> None:
        super().__init__(**options)
        self.served = 0

    def handle(self, method: str, payload: Payload) -> Payload:
        self.served += 1
        return super().handle(method, payload)

    def save_checkpoint(self, uri: str) -> None:
        Path(uri).mkdir(parents=True, exist_ok=True)
        (Path(uri) / "state.json").write_text(json.dumps({"served": self.served}))

    def load_checkpoint(self, uri: str) -> None:
        self.served = json.loads((Path(uri) / "state.json").read_text())["served"]
