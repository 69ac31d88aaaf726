"""The producer stage on auxiliary workers (seed §5.5: "select stages of the data loader
pipeline can also run on auxiliary workers ... each auxiliary data loader would serve
multiple training workers").

`ProducerService` is an auxiliary service that fetches and transforms samples exactly as a
local producer does (`LocalSource`: the same datasets, transform and per-sample seeds), so
one auxiliary loader serves any number of ranks. On the rank's side, `RemoteSource` takes a
local producer's place in its pipeline: the feeder still walks the deterministic global
schedule and the collators still assemble batches in order, so the batches, the exact
resume and the freedom to change producer counts are those of the local pipeline. Each
local producer process keeps one fetch in flight; raise `data.producers` to keep more
auxiliary workers busy.

A chunk of samples crosses the wire as one byte buffer, laid out like a pipeline slot
(runtime.data.shm), and its description as JSON (never pickle: it comes off the network).

In a training config (examples/train/aux-loader.yaml; runtime.run.config checks that the
service is a producer service serving the data section's datasets and transform):

    aux:
      services:
        loader: {impl: "runtime.data.aux_producer:ProducerService", options: {data: ${data}}}
    data:
      producer_service: loader
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from runtime.aux.client import AuxClient, ServiceHandle
from runtime.data.config import DataConfig
from runtime.data.shm import TensorRef, pack, packed_size, unpack
from runtime.data.sources import IntSequence, LocalSource, SampleSource

_TENSOR, _TUPLE = "~tensor", "~tuple"  # markers of the description's non-JSON nodes


class ProducerService:
    """Serves `fetch`: the samples at (datasets, indices) transformed with their seeds."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.config = DataConfig.model_validate(data)
        self.source: LocalSource | None = None

    def startup_check(self) -> None:
        """Build the datasets and read one sample: a bad factory fails the worker's start."""
        torch.set_num_threads(1)  # a producer's choice (runtime.data.stages); scale by workers
        self.source = LocalSource(self.config)
        self.source.fetch([0], [0], [0])

    def handle(self, method: str, payload: dict[str, Any]) -> dict[str, Any]:
        """fetch: {datasets, indices, seeds} -> {data: the samples' bytes, layout: JSON}."""
        if method != "fetch":
            raise KeyError(f"producer service has no method {method!r}")
        if self.source is None:
            self.source = LocalSource(self.config)
        samples = self.source.fetch(payload["datasets"], payload["indices"], payload["seeds"])
        buffer = bytearray(packed_size(samples))
        spec = pack(samples, memoryview(buffer), what="a fetched chunk")
        return {"data": np.frombuffer(buffer, dtype=np.uint8), "layout": _to_json(spec)}


class RemoteSource:
    """A rank's producer stage asking the auxiliary loader for its samples."""

    def __init__(self, handle: ServiceHandle, rank: int) -> None:
        self.client = AuxClient(handle, rank)

    def fetch(
        self, datasets: IntSequence, indices: IntSequence, seeds: IntSequence
    ) -> list[Any]:
        reply = self.client.call("fetch", {
            "datasets": np.asarray(datasets, dtype=np.int64),
            "indices": np.asarray(indices, dtype=np.int64),
            "seeds": np.asarray(seeds, dtype=np.uint64),
        })
        with warnings.catch_warnings():  # the frame is read-only; the slot copy follows
            warnings.simplefilter("ignore", UserWarning)
            return unpack(_from_json(reply["layout"]), memoryview(reply["data"]), copy=False)


def remote_source(handle: ServiceHandle, rank: int) -> Callable[[], SampleSource]:
    """What DataPipeline runs in each producer process instead of a local source."""
    return functools.partial(RemoteSource, handle, rank)


def _to_json(spec: Any) -> Any:
    """A pack description as JSON values: tensors and tuples become marked objects."""
    if isinstance(spec, TensorRef):
        dtype = str(spec.dtype).removeprefix("torch.")
        return {_TENSOR: [dtype, list(spec.shape), spec.offset, spec.numpy]}
    if isinstance(spec, dict):
        if not all(isinstance(key, str) for key in spec):
            raise TypeError("samples served by an auxiliary loader need string dict keys")
        return {key: _to_json(value) for key, value in spec.items()}
    if isinstance(spec, tuple):
        return {_TUPLE: [_to_json(value) for value in spec]}
    if isinstance(spec, list):
        return [_to_json(value) for value in spec]
    return spec


def _from_json(value: Any) -> Any:
    if isinstance(value, dict):
        if _TENSOR in value:
            dtype, shape, offset, is_numpy = value[_TENSOR]
            return TensorRef(getattr(torch, dtype), tuple(shape), offset, is_numpy)
        if _TUPLE in value:
            return tuple(_from_json(item) for item in value[_TUPLE])
        return {key: _from_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_from_json(item) for item in value]
    return value
