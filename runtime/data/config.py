"""Configuration of the per-rank data loader pipeline (the `data` section of a training config)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from runtime.components import Component, check_callable, check_component

# The auxiliary service that runs the producer stage (runtime.data.aux_producer).
PRODUCER_SERVICE_IMPL = "runtime.data.aux_producer:ProducerService"


class DatasetSource(Component):
    """One map-style dataset of the mixture: `{name, weight, _target_, ...kwargs}`, where
    `_target_` (a dotted path) is called with the other keys and returns an object with
    `__len__` and `__getitem__`. `name` and `weight` are this section's own keys, never
    keyword arguments."""

    name: str = Field(min_length=1, description="Short name, unique within `data.datasets`.")
    weight: float = Field(
        default=1.0, gt=0, description="Share of each epoch drawn from this dataset (relative)."
    )

    @model_validator(mode="before")
    @classmethod
    def _not_the_old_form(cls, data: Any) -> Any:
        if isinstance(data, dict) and "factory" in data:
            raise ValueError("`factory: module:Class` and `kwargs:` are now `_target_: "
                             "module.Class` with the keyword arguments as keys of the entry")
        return data


class DataConfig(BaseModel):
    """How each training rank feeds batches: sources, schedule and pipeline shape."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    datasets: list[DatasetSource] = Field(
        min_length=1, description="Datasets mixed into one global sampling schedule."
    )
    batch_size: int = Field(gt=0, description="Samples per batch on each rank.")
    seed: int = Field(default=0, ge=0, description="Seed of the global sampling schedule.")
    shuffle: bool = Field(default=True, description="Shuffle the global order every epoch.")
    samples_per_epoch: int | None = Field(
        default=None,
        gt=0,
        description="Global samples per epoch; default: the total length of all datasets.",
    )
    transform: Component | None = Field(
        default=None,
        description="`{_target_, ...kwargs}` applied to each sample in the producers "
                    "(a class: its instance; a function: called as f(sample, **kwargs)).",
    )
    collate: Component | None = Field(
        default=None,
        description="`{_target_, ...kwargs}` turning a list of samples into a batch "
                    "(as `transform`); default: torch's default_collate (stacks tensors).",
    )
    producers: int = Field(default=2, ge=1, le=64, description="Producer processes per rank.")
    producer_service: str | None = Field(
        default=None,
        min_length=1,
        description="Auxiliary service (in `aux.services`, impl "
                    f"`{PRODUCER_SERVICE_IMPL}`) whose workers fetch and transform the "
                    "samples for every rank; each producer process then keeps one request in "
                    "flight. None: the producers fetch and transform themselves.",
    )
    collators: int = Field(default=1, ge=1, le=16, description="Collator processes per rank.")
    chunk_size: int | None = Field(
        default=None,
        gt=0,
        description="Samples per producer work item; default: the whole batch.",
    )
    prefetch_batches: int = Field(
        default=4, ge=1, le=256, description="Batches in flight per collator (queue bound)."
    )
    slot_mb: float = Field(
        default=64.0, gt=0, description="Size of one shared-memory slot; must hold one batch."
    )
    start_method: Literal["fork", "forkserver", "spawn"] = Field(
        default="forkserver", description="How stage processes start (multiprocessing)."
    )
    io_threads: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Reads each producer keeps in flight (threads; for high-latency storage).",
    )
    timeout_s: float = Field(
        default=300.0, gt=0, description="Longest wait for one batch before the loader fails."
    )

    @model_validator(mode="after")
    def _names_unique(self) -> DataConfig:
        names = [d.name for d in self.datasets]
        if len(set(names)) != len(names):
            raise ValueError(f"data.datasets: names must be unique, got {names}")
        if self.chunk_size is not None and self.chunk_size > self.batch_size:
            raise ValueError("data.chunk_size: must not exceed data.batch_size")
        return self


def check_data(config: DataConfig) -> None:
    """Import every dataset, transform and collate target and bind its keyword arguments,
    without building any: a ConfigError names the field (`data.datasets[i]._target_` or the
    wrong keyword) and what is allowed."""
    for i, dataset in enumerate(config.datasets):
        check_component(dataset, f"data.datasets[{i}]")
    for field in ("transform", "collate"):
        section = getattr(config, field)
        if section is not None:
            check_callable(section, f"data.{field}")
