"""`gkr images build|pin|list`: the platform's images, from a commit to a pinned digest
(generator.images)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from generator.cli._app import RootOption, app, out_console
from generator.cli._output import Output, OutputOption, emit

if TYPE_CHECKING:
    from generator.images import Pinned

images_app = typer.Typer(help="Images: build, push and pin to a digest.", no_args_is_help=True)
app.add_typer(images_app, name="images")

TlsOption = Annotated[bool, typer.Option(
    "--tls-verify/--no-tls-verify", help="Verify the registry's TLS certificate (a local "
    "registry on 127.0.0.1 speaks plain HTTP: --no-tls-verify).")]


@images_app.command()
def build(
    names: Annotated[list[str], typer.Argument(help="Images of platform/catalog/images.yaml "
                                               "`builds`.")],
    registry: Annotated[str | None, typer.Option(
        help="Push to HOST[:PORT][/PATH] instead of the catalog's repository.")] = None,
    storage_driver: Annotated[str | None, typer.Option(
        help="buildah's storage driver (vfs where overlay is not available).")] = None,
    tls_verify: TlsOption = True,
    root: RootOption = None,
) -> None:
    """Build each image's stage of platform/images/Containerfile at HEAD with buildah, push
    it, pin the digest the registry returns in images.yaml with its provenance in
    images.lock, and re-render the tree."""
    from generator.images import Buildah
    from generator.images import build as build_image
    from generator.repo import find_root

    found = find_root(root)
    for name in names:
        _print(build_image(found, name, registry, Buildah(storage_driver, tls_verify=tls_verify)))


@images_app.command()
def pin(
    names: Annotated[list[str], typer.Argument(help="Upstream images of images.yaml.")],
    tls_verify: TlsOption = True,
    root: RootOption = None,
) -> None:
    """Resolve each upstream image's tag to the digest its registry serves (skopeo), pin it
    in images.yaml with its provenance, and re-render the tree."""
    from generator.images import Buildah, resolve
    from generator.repo import find_root

    found = find_root(root)
    for name in names:
        _print(resolve(found, name, Buildah(tls_verify=tls_verify)))


@images_app.command("list")
def list_command(output: OutputOption = Output.table, root: RootOption = None) -> None:
    """Every image of the catalog with its provenance: built (from which commit, and whether
    the definition changed since), resolved from a tag, a placeholder, or by tag."""
    from generator.images import image_rows
    from generator.repo import find_root

    emit(image_rows(find_root(root)), output,
         {"name": "NAME", "provenance": "PROVENANCE", "reference": "REFERENCE"})


def _print(pinned: Pinned) -> None:
    out_console.print(f"pinned {pinned.name}: {pinned.reference} "
                      f"({pinned.changed_files} files of the tree re-rendered)")
