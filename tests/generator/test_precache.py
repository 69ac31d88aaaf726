"""The image pre-cache DaemonSet of each cluster warms exactly the images its jobs' pods name,
plus Warden's check image (generator.precache), whether the jobs were rendered now or come
from the render cache."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from generator.catalog import Catalog
from generator.precache import warm_name
from generator.render import render_tree
from generator.tree import Tree
from tests.generator.conftest import ScratchRepo


def _warmed(tree: Tree, cluster: str) -> dict[str, str]:
    (daemonset,) = tree.manifests[f"kustomize/overlays/{cluster}/platform/image-precache.yaml"]
    pod = daemonset["spec"]["template"]["spec"]
    return {c["name"]: c["image"] for c in pod.get("initContainers", [])}


def _second_cluster(repo: ScratchRepo) -> None:
    text = (repo.root / "clusters/all-accelerators.yaml").read_text()
    (repo.root / "clusters/second.yaml").write_text(text.replace("all-accelerators", "second"))


def test_each_cluster_warms_the_images_of_its_own_jobs_and_no_other(
        repo: ScratchRepo, spec: Callable[..., dict[str, Any]]) -> None:
    _second_cluster(repo)
    repo.write_spec("stable", spec(image="trainer"))
    nightly = repo.write_spec("nightly", spec(cluster="second", image="trainer-nightly"))
    images = Catalog(repo.root).images
    first = {images["trainer"], images["dcgm"]}
    second = {images["trainer-nightly"], images["dcgm"]}
    for _ in range(2):  # rendered now, then every job from the render cache
        tree = render_tree(repo.root)
        assert set(_warmed(tree, "all-accelerators").values()) == first
        assert set(_warmed(tree, "second").values()) == second
    assert images["devbox"] not in str(tree.files)  # a catalog image no job names: not pulled
    nightly.unlink()
    tree = render_tree(repo.root)
    assert set(_warmed(tree, "second").values()) == {images["dcgm"]}


def test_a_sidecar_image_is_warmed_and_the_keep_alive_image_is_not(
        repo: ScratchRepo, spec: Callable[..., dict[str, Any]]) -> None:
    repo.write_spec("mega", spec(accelerator="H100-Mega"))
    tree = render_tree(repo.root, use_cache=False)
    (path,) = [p for p in tree.files if p.endswith("/mega.yaml")]
    named = {c["image"] for c in _containers(tree.manifests[path])}
    warmed = _warmed(tree, "all-accelerators")
    keep_alive = Catalog(repo.root).images["gkr-runtime"]
    assert named - {keep_alive} <= set(warmed.values())
    assert any("tcpgpudmarxd" in image for image in warmed.values())  # TCPXO's sidecar
    assert keep_alive not in warmed.values()
    assert all(name == warm_name(image) for name, image in warmed.items())


def _containers(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        found = [c for key in ("containers", "initContainers") for c in node.get(key) or []
                 if isinstance(c, dict) and "image" in c]
        return found + [c for value in node.values() for c in _containers(value)]
    if isinstance(node, list):
        return [c for value in node for c in _containers(value)]
    return []


def test_warm_names_are_container_names_and_tell_two_tags_apart() -> None:
    a = warm_name("us-docker.pkg.dev/p/images/trainer@sha256:" + "a" * 64)
    b = warm_name("us-docker.pkg.dev/p/images/trainer@sha256:" + "b" * 64)
    upstream = warm_name("nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04")
    assert a != b and a.startswith("warm-trainer-") and upstream.startswith("warm-dcgm-")
    assert all(len(n) <= 63 and n.replace("-", "").isalnum() for n in (a, b, upstream))


