"""A rank's aux-service error crosses Ray's pickling intact, so the driver reports it."""

from __future__ import annotations

import pickle

from runtime.aux.errors import RemoteError


def test_remote_error_survives_pickling() -> None:
    error = pickle.loads(pickle.dumps(RemoteError("teacher", "ValueError", "bad option")))
    assert isinstance(error, RemoteError)
    assert (error.service, error.remote_type, str(error)) == (
        "teacher", "ValueError", "teacher: ValueError: bad option")
