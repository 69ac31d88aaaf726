"""Child process of the crash-safety test: commits step 1, then starts step 2 and hangs
inside the background write until the parent kills it (a writer dying mid-checkpoint)."""

from __future__ import annotations

import os
import sys
import threading

import torch

from runtime.checkpoint.config import CheckpointConfig
from runtime.checkpoint.manager import Checkpointer

_SAY = threading.Lock()


def say(line: str) -> None:
    """One whole line in one write: the two threads' lines must never interleave."""
    with _SAY:
        os.write(sys.stdout.fileno(), f"{line}\n".encode())


class BlocksWhenWritten:
    """Copied instantly when staged; its serialization by the writer never finishes."""

    def __deepcopy__(self, memo: dict) -> BlocksWhenWritten:
        return self

    def __reduce__(self) -> tuple:
        say("writing")
        threading.Event().wait()
        raise AssertionError("unreachable")


def main(uri: str) -> None:
    ckpt = Checkpointer(CheckpointConfig(uri=uri, interval_steps=1))
    ckpt.save(1, {"w": torch.full((1024, 256), 1.0)})
    ckpt.wait()
    ckpt.save(2, {"w": torch.full((1024, 256), 2.0), "blocker": BlocksWhenWritten()})
    say("staged")
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1])
