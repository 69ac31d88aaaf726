"""Save and restore training state with torch.distributed.checkpoint (DCP).

After a step, ranks of the lowest replica group stage their shard of the state into host
memory and training goes on while a background thread writes it (DCP async_save). When
the write completes everywhere, rank 0 writes the commit marker and prunes old steps.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, Protocol

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict_saver import AsyncSaveResponse

from runtime.checkpoint.config import CheckpointConfig
from runtime.checkpoint.metadata import reader_for
from runtime.checkpoint.storage import CheckpointError, CheckpointStore


class CheckpointHook(Protocol):
    """An auxiliary service's part of a checkpoint; rank 0 calls it at snapshot and resume."""

    name: str

    def save(self, step: int, uri: str) -> None:
        """Persist the service's state for `step` under `uri`."""
        ...

    def load(self, step: int, uri: str) -> None:
        """Restore the service's state saved under `uri`."""
        ...


# DCP reports a failed write as a CheckpointException, which derives from BaseException.
_WRITE_ERRORS = (Exception, CheckpointException)


def _describe(error: BaseException) -> str:
    """One line per failed rank instead of DCP's concatenated tracebacks."""
    if not isinstance(error, CheckpointException):
        return f"{type(error).__name__}: {error}"
    return "; ".join(
        f"rank {rank}: {type(cause).__name__}: {cause}"
        for rank, (cause, _) in sorted(error.failures.items())
    )


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


class Checkpointer:
    """Periodic, committed, pruned DCP checkpoints of one training run."""

    def __init__(
        self,
        config: CheckpointConfig,
        *,
        replica_group: int = 0,
        process_group: dist.ProcessGroup | None = None,
        hooks: Sequence[CheckpointHook] = (),
        run: str | None = None,
    ) -> None:
        """`replica_group`: this rank's group index (only group 0 saves; fault tolerance
        updates it as the quorum changes). `run`: the run id written into commit markers, so
        that a restarted worker group finds the checkpoints of its own run."""
        self.config, self.hooks, self.run = config, list(hooks), run
        self.store = CheckpointStore(config.uri)
        self.replica_group = replica_group
        # Background writes run collectives; a group of their own keeps them from
        # interleaving with the training step's collectives on the default group.
        self.group = process_group
        if _distributed() and process_group is None and config.async_save:
            self.group = dist.new_group(backend="gloo")
        self.rank = dist.get_rank() if _distributed() else 0
        self._pending: Future[Any] | None = None
        # One stager for the whole run keeps its host buffers between checkpoints, so
        # staging is a copy into warm memory instead of a fresh allocation every time. On a
        # GPU those buffers are pinned and the device-to-host copy does not block the step
        # (DCP's StagingOptions); on CPU there is nothing to pin.
        cuda = torch.cuda.is_available()
        self._stager = DefaultStager(StagingOptions(use_pinned_memory=cuda,
                                                    use_shared_memory=False,
                                                    use_async_staging=False,
                                                    use_non_blocking_copy=cuda))

    @property
    def saving(self) -> bool:
        """Whether this rank takes part in saving: the lowest replica group does (seed §7.1)."""
        return self.config.enabled and self.replica_group == 0

    def due(self, step: int) -> bool:
        return self.saving and step % self.config.interval_steps == 0

    def maybe_save(self, step: int, state: dict[str, Any]) -> bool:
        """Save when `step` is due; returns whether a checkpoint was started."""
        if not self.due(step):
            return False
        self.save(step, state)
        return True

    def save(self, step: int, state: dict[str, Any]) -> None:
        """Snapshot `state` (tensors, DTensors, Stateful objects) for `step`.

        Returns once the snapshot is in host memory (async) or on storage (blocking).
        """
        self.wait()
        if self.rank == 0:
            self.store.clear(step)
        uri = self.store.step_uri(step)
        if self.rank == 0:
            for hook in self.hooks:
                hook.save(step, f"{uri}/aux/{hook.name}")
        writer = FsspecWriter(uri) if self.store.remote else dcp.FileSystemWriter(uri)
        if not self.config.async_save:
            try:
                dcp.save(state, storage_writer=writer, process_group=self.group)
            except _WRITE_ERRORS as exc:
                raise self._failure(exc) from exc
            self._committed(step)
            return
        future = dcp.async_save(
            state, storage_writer=writer, process_group=self.group, async_stager=self._stager
        )
        upload = future.upload_completion if isinstance(future, AsyncSaveResponse) else future
        # A future of our own completes only after the marker is written, so wait()
        # never returns between the write and the commit.
        committed: Future[None] = Future()
        upload.add_done_callback(lambda done: self._after_write(step, done, committed))
        self._pending = committed

    def _after_write(self, step: int, done: Future[Any], committed: Future[None]) -> None:
        try:
            done.result()
            self._committed(step)
        except _WRITE_ERRORS as exc:
            committed.set_exception(exc)
        else:
            committed.set_result(None)

    def _committed(self, step: int) -> None:
        if self.rank != 0:
            return
        world = dist.get_world_size(self.group) if _distributed() else 1
        info = {"world_size": world, "hooks": [h.name for h in self.hooks], "run": self.run}
        self.store.commit(step, info)
        self.store.prune(self.config.keep_last)

    def check(self) -> None:
        """Raise now if the background write has already failed (without waiting for it)."""
        pending = self._pending
        if pending is not None and pending.done() and pending.exception() is not None:
            self.wait()

    def wait(self) -> None:
        """Block until the checkpoint being written, if any, is committed; raise its error."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            pending.result()
        except _WRITE_ERRORS as exc:
            raise self._failure(exc) from exc

    def _failure(self, error: BaseException) -> CheckpointError:
        return CheckpointError(
            f"writing a checkpoint under {self.config.uri} failed: {_describe(error)}"
        )

    def load(self, state: dict[str, Any], resume_from: str | None = None) -> int | None:
        """Restore `state` in place (resharding to this run's layout); the step, or None."""
        wanted = resume_from if resume_from is not None else self.config.resume_from
        if not self.config.enabled and resume_from is None:
            return None
        uri = self.store.resolve(wanted)
        if uri is None:
            return None
        reader = reader_for(uri)
        # Read here, not only inside DCP: a refused `.metadata` raises CheckpointMetadataError
        # naming the file, not DCP's rank-local fallback (see SafeFileSystemReader).
        reader.read_metadata()
        dcp.load(state, storage_reader=reader, process_group=self.group)
        step = int(os.path.basename(uri).removeprefix("step-"))
        if self.rank == 0:
            for hook in self.hooks:
                hook.load(step, f"{uri}/aux/{hook.name}")
        return step

    def close(self) -> None:
        """Finish the write in flight so that no checkpoint is left half-written by choice."""
        try:
            self.wait()
        finally:
            self._stager.close()
