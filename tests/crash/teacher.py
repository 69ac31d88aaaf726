"""The teacher of the crash tests: the built-in encoder with a request budget, loaded by the
auxiliary workers as `tests.crash.teacher:BudgetedTeacher`.

`max_requests` is a smoke-test setting: a run configured with it crashes once the teacher has
served that many requests, which is the configuration mistake the crash tests diagnose.
"""

from __future__ import annotations

from runtime.aux.services import EncoderService, Payload


class BudgetedTeacher(EncoderService):
    """EncoderService that refuses every request past `max_requests` (None: no budget)."""

    def __init__(self, max_requests: int | None = None, **options: int) -> None:
        super().__init__(**options)
        self.max_requests, self.served = max_requests, 0

    def handle(self, method: str, payload: Payload) -> Payload:
        if self.max_requests is not None and self.served >= self.max_requests:
            raise RuntimeError(f"request budget spent: options.max_requests={self.max_requests} "
                               f"allows {self.max_requests} requests, and this is request "
                               f"{self.served + 1}")
        self.served += 1
        return super().handle(method, payload)
