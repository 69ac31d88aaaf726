"""DiLoCo's error, apart from the modules that need torch and ZeroMQ."""

from __future__ import annotations

from runtime.errors import RuntimeFailure


class DilocoError(RuntimeFailure):
    """The synchroniser refused a learner, or a learner or the synchroniser gave up."""
