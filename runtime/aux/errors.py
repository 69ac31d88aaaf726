"""Errors of the auxiliary-service layer; each says which service and what went wrong."""

from __future__ import annotations

from runtime.errors import RuntimeFailure


class AuxError(RuntimeFailure):
    """Base of every auxiliary-service failure."""


class AuxStartupError(AuxError):
    """A service's workers or proxies did not pass their startup check in time."""


class AuxTimeout(AuxError):
    """No reply arrived before the request's deadline (after every allowed retry)."""


class AuxBusy(AuxError):
    """The worker's queues stayed full (back-pressure) after every retry: this connection's
    share, or the worker's total bound."""


class WireError(AuxError):
    """A message read off the wire is not one this layer sends (runtime.aux.wire): a peer's
    bad or hostile bytes. Names what was wrong and what is allowed; nothing of it is used."""


class WorkerLost(AuxError):
    """The worker handling the request died and the service's policy is to fail."""


class RemoteError(AuxError):
    """The service raised while handling the request; carries the remote type and message."""

    def __init__(self, service: str, remote_type: str, message: str) -> None:
        self.service, self.remote_type, self.message = service, remote_type, message
        super().__init__(f"{service}: {remote_type}: {message}")

    def __reduce__(self) -> tuple[object, ...]:
        # Ray pickles a rank's error to the driver: rebuild it from its parts.
        return type(self), (self.service, self.remote_type, self.message)
