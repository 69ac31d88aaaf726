"""The mesh a layout asks for, and the layouts refused before any rank starts."""

from __future__ import annotations

import pytest

from runtime.errors import ConfigError
from runtime.models import MLP
from runtime.parallel import MeshShape, flops_per_token, mesh_shape, parallelize
from tests.parallel.layouts import Layout, tiny


@pytest.mark.parametrize(("layout", "world", "shape"), [
    (Layout(), 4, MeshShape(1, 4, 1)),
    (Layout(dp_replicate=2), 4, MeshShape(2, 2, 1)),
    (Layout(tp=2), 8, MeshShape(1, 4, 2)),
    (Layout(dp_replicate=2, dp_shard=1), 2, MeshShape(2, 1, 1)),
    (Layout(), 1, MeshShape(1, 1, 1)),
    (Layout(dp_replicate=-1, dp_shard=2), 8, MeshShape(4, 2, 1)),
])
def test_minus_one_takes_the_rest_of_the_world(layout: Layout, world: int,
                                                shape: MeshShape) -> None:
    assert mesh_shape(layout, world) == shape


@pytest.mark.parametrize(("shape", "line"), [
    (MeshShape(2, 2, 1), "mesh 2 replicate x 2 shard x 1 tensor = 4 ranks: HSDP"),
    (MeshShape(1, 4, 2), "mesh 1 replicate x 4 shard x 2 tensor = 8 ranks: FSDP + TP"),
    (MeshShape(2, 1, 1), "mesh 2 replicate x 1 shard x 1 tensor = 2 ranks: replicated"),
    (MeshShape(1, 1, 2), "mesh 1 replicate x 1 shard x 2 tensor = 2 ranks: TP"),
    (MeshShape(1, 1, 1), "mesh 1 replicate x 1 shard x 1 tensor = 1 ranks: one rank"),
])
def test_explain_names_the_strategy(shape: MeshShape, line: str) -> None:
    assert shape.explain() == line


@pytest.mark.parametrize(("layout", "world", "field", "says"), [
    (Layout(cp=2), 4, "layout.cp", "not built in GKR's driver yet; allowed: 1"),
    (Layout(pp=2), 4, "layout.pp", "not built in GKR's driver yet; allowed: 1"),
    (Layout(dp_replicate=2, dp_shard=3), 4, "layout", "2*3*1 = 6, but the world has 4 ranks"),
    (Layout(tp=3), 4, "layout.dp_shard", "4 ranks does not divide by the other dimensions' 3"),
    (Layout(dp_shard=0), 4, "layout.dp_shard", "allowed: >= 1, or -1"),
    (Layout(tp=0), 4, "layout.tp", "allowed: >= 1"),
    (Layout(dp_replicate=-1), 4, "layout.dp_replicate", "allowed: -1 for one of them at most"),
])
def test_layouts_that_cannot_run_are_refused_by_field(layout: Layout, world: int, field: str,
                                                      says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        mesh_shape(layout, world)
    assert caught.value.field == field
    assert says in caught.value.message


@pytest.mark.parametrize(("layout", "field", "says"), [
    (Layout(tp=2), "layout.tp", "the model MLP has no apply_tensor_parallel"),
    (Layout(param_dtype="float16"), "layout.param_dtype", "allowed: float32, bfloat16"),
    (Layout(activation_checkpointing="selective"), "layout.activation_checkpointing",
     "allowed: ('none', 'full')"),
    (Layout(param_dtype="bfloat16"), "layout.param_dtype", "without a process group"),
])
def test_parallelize_refuses_what_the_model_or_process_cannot_do(layout: Layout, field: str,
                                                                 says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parallelize(MLP(), None, layout)
    assert caught.value.field == field
    assert says in caught.value.message


def test_flops_per_token_asks_the_model_and_is_none_where_it_cannot() -> None:
    model = tiny()
    assert flops_per_token(parallelize(model, None, Layout()), 64) == model.flops_per_token(64)
    assert flops_per_token(parallelize(tiny(), None, Layout(activation_checkpointing="full")),
                           64) == model.flops_per_token(64)
    assert flops_per_token(MLP().layers[0], 64) is None
