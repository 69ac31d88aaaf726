"""`gkr submit`, and the options every cluster command shares: each command turns its flags
into one frozen request of `generator.cluster` and calls one function there.

A command imports the library in its body, so `gkr --help` and TAB completion stay fast.
`--cluster` and `--namespace` default as kubectl-ray's do: the job's spec in jobs/, then the
current kube context (see `generator.cluster.target`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from generator.cli._app import app, err_console, out_console
from generator.errors import BadRequest
from runtime.identity import JobKind

if TYPE_CHECKING:
    from generator.cluster import SubmitOutcome
    from generator.cluster.target import Asked


def complete_clusters(incomplete: str) -> list[str]:
    """TAB completion of --cluster: file names in clusters/, nothing parsed."""
    from generator.repo import find_root

    try:
        names = [path.stem for path in (find_root() / "clusters").glob("*.yaml")]
    except BadRequest:
        return []
    return sorted(name for name in names if name.startswith(incomplete))


ClusterOption = Annotated[str | None, typer.Option(
    "--cluster", autocompletion=complete_clusters,
    help="Cluster from clusters/ (default: the cluster of jobs/<team>/NAME.yaml, else the one "
         "whose kube_context is the current context).")]
NamespaceOption = Annotated[str | None, typer.Option(
    "--namespace", "-n",
    help="Namespace (default: the team namespace of jobs/<team>/NAME.yaml, else the current "
         "kube context's when it is a team namespace, else the cluster's only team namespace).")]
ForceOption = Annotated[bool, typer.Option(
    "--force", help="Act even on a job Argo CD manages (its selfHeal will undo it).")]
AcceleratorOption = Annotated[str | None, typer.Option(
    "--accelerator", "--accelerators", help="Accelerator type from the catalog (none: CPU).")]


def repo_root() -> Path:
    from generator.repo import find_root

    return find_root()


def asked(name: str | None, cluster: str | None, namespace: str | None) -> Asked:
    """What a cluster command was asked: the job and the scope flags, in this repository."""
    from generator.cluster.target import Asked

    return Asked(repo_root(), name, cluster, namespace)


class ConsoleEvents:
    """A submit's events on the terminal: changes and results on stdout, progress on stderr."""

    def say(self, line: str) -> None:
        out_console.print(line)

    def note(self, line: str) -> None:
        err_console.print(line)


@app.command()
def submit(
    name: Annotated[str | None, typer.Argument(help="Job name (default: the spec's).")] = None,
    kind: Annotated[JobKind | None, typer.Argument(help="rayjob, raycluster or job.")] = None,
    spec_file: Annotated[Path | None, typer.Option("-f", "--file", help="A job spec YAML.")] = None,
    cluster: Annotated[str | None, typer.Option(
        autocompletion=complete_clusters, help="Target cluster (default: the spec's; without "
        "-f, the one whose kube_context is the current context).")] = None,
    namespace: Annotated[str | None, typer.Option(
        "--namespace", "-n", help="Team namespace (default: the spec's team; without -f, the "
        "kube context's when it is a team namespace, else the cluster's only one).")] = None,
    owner: Annotated[str | None, typer.Option(help="E-mail of the job's owner (default: the "
                                              "spec's; without -f, git config user.email)."
                                              )] = None,
    pods: Annotated[int | None, typer.Option(help="GPU pods.")] = None,
    gpus: Annotated[int | None, typer.Option(help="GPUs per pod.")] = None,
    cpus: Annotated[float | None, typer.Option(help="CPUs per pod.")] = None,
    memory: Annotated[str | None, typer.Option(help="Memory per pod, e.g. 512Gi.")] = None,
    accelerator: AcceleratorOption = None,
    image: Annotated[str | None, typer.Option(
        "--image", "--docker-image", help="Image: a catalog name or repository@sha256:…")] = None,
    working_dir: Annotated[str | None, typer.Option(help="Local folder to ship, or a path/URI."
                                                    )] = None,
    env: Annotated[Path | None, typer.Option(
        "--env-file", "--env", help="YAML file of environment variables.")] = None,
    preemptible: Annotated[bool | None, typer.Option("--preemptible", help="Low priority."
                                                     )] = None,
    cmd: Annotated[str | None, typer.Option(help="Command to run.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the manifests only.")] = False,
    gitops: Annotated[bool, typer.Option(
        "--gitops", help="Commit the spec, its env file and its manifests on a new branch "
        "(the working tree, index and current branch are left alone).")] = False,
    branch: Annotated[str | None, typer.Option(
        help="Branch for --gitops (default: gkr/submit-TEAM-NAME); must not exist.")] = None,
    base: Annotated[str | None, typer.Option(
        help="Commit the --gitops branch starts from (default: HEAD).")] = None,
    wait: Annotated[bool, typer.Option(
        "--wait", help="Watch a rayjob until the preflight it runs in the cluster has a result "
        "(exit 5 if it failed); the job never depends on this.")] = False,
    timeout: Annotated[int, typer.Option(help="Seconds --wait watches.")] = 1800,
    force: ForceOption = False,
) -> None:
    """Submit a rayjob, raycluster or job (flags override -f values), by server-side apply.
    A rayjob's preflight runs in the cluster before its cmd (`gkr status` shows its result)."""
    from generator.cluster import JobsRequest, SpecFlags, SubmitMode, SubmitRequest, submit_job

    if dry_run and gitops:
        raise BadRequest("--dry-run and --gitops: choose one")
    flags = SpecFlags(name=name, kind=kind.value if kind else None, cluster=cluster,
                      namespace=namespace, owner=owner, pods=pods, gpus=gpus, cpus=cpus,
                      memory=memory, accelerator=accelerator, image=image,
                      working_dir=working_dir, env_file=env, preemptible=preemptible, cmd=cmd)
    mode = SubmitMode.DRY_RUN if dry_run else SubmitMode.GITOPS if gitops else SubmitMode.APPLY
    request = SubmitRequest(JobsRequest(repo_root(), flags, spec_file), mode,
                            branch, base, wait, timeout, force)
    _print_outcome(submit_job(request, ConsoleEvents()))


def _print_outcome(outcome: SubmitOutcome) -> None:
    """A dry run's manifests (several jobs each say where they go), or the --gitops commit;
    an apply said what it did as it went."""
    from generator.cluster import SubmitMode

    if outcome.commit is not None:
        made = outcome.commit
        out_console.print(f"committed {made.commit[:10]} on branch {made.branch} (from "
                          f"{made.base[:10]}): push it and open a PR")
    elif outcome.mode is SubmitMode.DRY_RUN:
        import yaml

        jobs = outcome.jobs
        for job, objects in zip(jobs, outcome.manifests, strict=True):
            if len(jobs) > 1:
                print(f"# {job.name}: cluster {job.cluster.name}, namespace {job.namespace}")
            print(yaml.safe_dump_all(objects, sort_keys=False), end="")
            if len(jobs) > 1 and job is not jobs[-1]:
                print("---")
