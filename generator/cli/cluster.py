"""`gkr submit/list/status/logs/delete/shell/cp/port-forward/check`: thin commands over
`generator.cluster` (flags -> frozen request -> one call).

Each command imports the library in its body, so `gkr --help` and TAB completion stay fast.
`--cluster` and `--namespace` default as kubectl-ray's do: the job's spec in jobs/, then the
current kube context (see `generator.cluster.target`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from generator.cli._app import app, cancelled, confirm, err_console, out_console
from generator.cli._output import Output, OutputOption, age, emit
from generator.errors import BadRequest
from runtime.identity import JobKind

if TYPE_CHECKING:
    from generator.cluster.target import Target
    from generator.resolve import ResolvedJob
    from runtime.kube import Kube, Obj
    from runtime.preflight.result import GateRecord


def _clusters(incomplete: str) -> list[str]:
    """TAB completion of --cluster: file names in clusters/, nothing parsed."""
    from generator.repo import find_root

    try:
        names = [path.stem for path in (find_root() / "clusters").glob("*.yaml")]
    except BadRequest:
        return []
    return sorted(name for name in names if name.startswith(incomplete))


ClusterOption = Annotated[str | None, typer.Option(
    "--cluster", autocompletion=_clusters,
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
JOB_COLUMNS = {"name": "NAME", "kind": "KIND", "namespace": "NAMESPACE", "phase": "PHASE",
               "created": "AGE", "owner": "OWNER"}


def _target(name: str | None, cluster: str | None, namespace: str | None) -> Target:
    from generator.cluster.target import Asked, find_target
    from generator.repo import find_root

    return find_target(Asked(find_root(), name, cluster, namespace))


def _connect(target: Target) -> Kube:
    from runtime.kube import Kube

    return Kube.connect(target.cluster.kube_context)


@app.command()
def submit(
    name: Annotated[str | None, typer.Argument(help="Job name (default: the spec's).")] = None,
    kind: Annotated[JobKind | None, typer.Argument(help="rayjob, raycluster or job.")] = None,
    spec_file: Annotated[Path | None, typer.Option("-f", "--file", help="A job spec YAML.")] = None,
    cluster: Annotated[str | None, typer.Option(
        autocompletion=_clusters, help="Target cluster (default: the spec's; without -f, the "
        "one whose kube_context is the current context).")] = None,
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
    from generator.catalog import Catalog
    from generator.cluster import SubmitRequest, prepare_all
    from generator.cluster import manifests as render_manifests
    from generator.repo import find_root

    values = {"name": name, "kind": kind.value if kind else None, "cluster": cluster,
              "namespace": namespace, "owner": owner, "pods": pods, "gpus": gpus, "cpus": cpus,
              "memory": memory, "accelerator": accelerator, "image": image,
              "working_dir": working_dir, "env_file": str(env) if env else None,
              "preemptible": preemptible, "cmd": cmd}
    flags = {k: (int(v) if k == "cpus" and float(v).is_integer() else v)
             for k, v in values.items() if v is not None}
    if (branch or base) and not gitops:
        raise BadRequest("--branch and --base go with --gitops")
    root = find_root()
    if spec_file is None:
        flags |= _flag_defaults(root, flags)
    request = SubmitRequest(flags=flags, spec_file=spec_file, root=root)
    catalog = Catalog(root)
    # A --gitops job runs once merged, so its code archive must be in the store by then.
    jobs = prepare_all(request, catalog, upload=not dry_run)  # several: a DiLoCo experiment
    documents = [render_manifests(job, catalog) for job in jobs]
    if dry_run:
        _print_manifests(jobs, documents)
    elif gitops:
        from generator.cluster.gitops import referenced_env, submit_gitops

        job = _one_job(jobs)
        env_source = env.resolve() if env else referenced_env(job, spec_file)
        made = submit_gitops(root, job, env_source, branch, base)
        out_console.print(f"committed {made.commit[:10]} on branch {made.branch} (from "
                          f"{made.base[:10]}): push it and open a PR")
    else:
        for job, objects in zip(jobs, documents, strict=True):
            _apply(root, job, objects, force=force, wait=wait, timeout=timeout)


def _print_manifests(jobs: list[ResolvedJob], documents: list[list[Obj]]) -> None:
    """The manifests `submit` would apply; several jobs each say where they go."""
    import yaml

    for job, objects in zip(jobs, documents, strict=True):
        if len(jobs) > 1:
            print(f"# {job.name}: cluster {job.cluster.name}, namespace {job.namespace}")
        print(yaml.safe_dump_all(objects, sort_keys=False), end="")
        if len(jobs) > 1 and job is not jobs[-1]:
            print("---")


def _one_job(jobs: list[ResolvedJob]) -> ResolvedJob:
    if len(jobs) > 1:
        raise BadRequest("--gitops commits one job; a DiLoCo experiment renders to several "
                         "clusters: add its spec under jobs/<team>/, run `gkr render` and "
                         "open a pull request with both")
    return jobs[0]


def _flag_defaults(root: Path, flags: dict[str, Any]) -> dict[str, Any]:
    """For a spec made of flags only: the cluster and namespace as `_target` finds them, and
    the owner from `git config user.email`, said on stderr."""
    from generator.cluster.target import Asked, find_target

    target = find_target(Asked(root, None, flags.get("cluster"), flags.get("namespace")))
    return {"cluster": target.cluster.name, "namespace": target.namespace,
            "owner": flags.get("owner") or _default_owner(root)}


def _default_owner(root: Path) -> str:
    from generator.vcs import git_email

    email = git_email(root)
    if not email:
        raise BadRequest("--owner is needed: no spec file names one and `git config user.email` "
                         "is not set")
    err_console.print(f"owner: {email} (from git config user.email; --owner to change)")
    return email


def _apply(root: Path, job: ResolvedJob, documents: list[Obj], *, force: bool, wait: bool,
           timeout: int) -> None:
    """Server-side apply, refused for a job Argo CD manages unless `force`; then, with
    `wait`, watch the preflight's result."""
    from generator.cluster import apply_all
    from generator.cluster.argocd import refuse_if_managed
    from generator.pods import gated
    from runtime.kube import Kube

    api = Kube.connect(job.cluster.kube_context)
    if not force:
        top = api.kind(job.traits.api_version, job.traits.object_kind)
        live = api.find(top, job.name, namespace=job.namespace)
        refuse_if_managed(root, job.cluster.name, job.namespace, job.name, live, "apply")
    for obj in apply_all(api, documents):
        meta = obj["metadata"]
        out_console.print(f"applied {obj['kind']} {meta['namespace']}/{meta['name']} "
                          f"(resourceVersion {meta['resourceVersion']})")
    if gated(job):
        out_console.print(f"the preflight runs in the cluster before the cmd; `gkr status "
                          f"{job.name}` shows its result")
    if wait and gated(job):
        _wait_preflight(api, job, timeout)


def _wait_preflight(api: Kube, job: ResolvedJob, timeout: int) -> None:
    """Seed §2.4, watched from here: the gate's final result; a failure exits 5 (the job has
    already acted on it by its own policy)."""
    from generator.cluster.preflight import wait_preflight
    from generator.errors import CheckFailed

    record = wait_preflight(api, job, timeout, err_console.print)
    out_console.print(f"preflight: {_preflight_line(record)}")
    if not record.passed:
        raise CheckFailed(f"preflight of {job.name} failed: {record.message}")


def _preflight_line(record: GateRecord) -> str:
    """One line of a GateRecord: verdict, attempt, what the job does, what was measured."""
    verdict = "PASSED" if record.passed else "FAILED"
    return (f"{verdict} (attempt {record.attempt}/{record.attempts}, {record.at}; "
            f"next: {record.next}): {record.message}")


@app.command("list")
def list_command(
    cluster: ClusterOption = None,
    namespace: Annotated[str | None, typer.Option(
        "--namespace", "-n", help="Namespace (default: every team namespace of the cluster).")
    ] = None,
    output: OutputOption = Output.table,
) -> None:
    """Jobs that gkr submitted, with phase, age and owner."""
    from generator.cluster import list_jobs
    from generator.cluster.target import Asked, find_cluster
    from generator.repo import find_root
    from runtime.kube import Kube

    _, found = find_cluster(Asked(find_root(), None, cluster, namespace))
    namespaces = [namespace] if namespace else sorted(t.namespace for t in found.teams.values())
    rows = list_jobs(Kube.connect(found.kube_context), namespaces)
    emit([r.model_dump() for r in rows], output, JOB_COLUMNS, title=f"jobs on {found.name}",
         empty=f"No resources found on {found.name} in {', '.join(namespaces)}.")


@app.command()
def status(name: str, cluster: ClusterOption = None, namespace: NamespaceOption = None,
           output: OutputOption = Output.table) -> None:
    """Phase, pods with their nodes, pending reasons from events, Kueue admission, age, and
    the result of a rayjob's preflight."""
    from generator.cluster import job_status

    target = _target(name, cluster, namespace)
    report = job_status(_connect(target), target.namespace, name)
    if output is not Output.table:
        emit([report.model_dump()], output)
        return
    since = age(report.created) if report.created else "unknown"
    out_console.print(f"{report.kind} {report.namespace}/{report.name}: {report.phase}, "
                      f"age {since}, Kueue: {report.admission}")
    emit([p.model_dump() for p in report.pods], output, title="pods", empty="no pods yet")
    for reason in report.pending:
        out_console.print(f"  pending: {reason}")
    if report.preflight is not None:
        out_console.print(f"preflight: {_preflight_line(report.preflight)}")
        for suspect in report.preflight.suspects:
            out_console.print(f"  suspect: {suspect.node} (pod {suspect.pod}): {suspect.reason}")


@app.command()
def logs(
    name: str, cluster: ClusterOption = None, namespace: NamespaceOption = None,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Stream new lines.")] = False,
    pod: Annotated[str | None, typer.Option("--pod", help="Pod name.")] = None,
    rank: Annotated[int | None, typer.Option("--rank", help="Worker rank.")] = None,
    tail: Annotated[int | None, typer.Option("--tail", help="Last N lines.")] = None,
) -> None:
    """Logs of a job's head (or Job pod), a named pod, or a worker by rank."""
    from generator.cluster.kubectl import main_container, select_pod
    from runtime.identity import selector
    from runtime.kube import POD

    target = _target(name, cluster, namespace)
    api, ns = _connect(target), target.namespace
    chosen = select_pod(api.list(POD, namespace=ns, labels=selector(job=name)), rank=rank,
                        name=pod)
    for line in api.logs(chosen["metadata"]["name"], namespace=ns,
                         container=main_container(chosen), follow=follow, tail=tail):
        print(line, flush=True)


@app.command()
def delete(
    name: str, cluster: ClusterOption = None, namespace: NamespaceOption = None,
    raycluster: Annotated[bool, typer.Option(
        "--raycluster", help="Required to delete a persistent RayCluster and its sentinel.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    force: ForceOption = False,
) -> None:
    """Delete a job; a persistent RayCluster only with --raycluster and confirmation; a job
    Argo CD manages only with --force (delete its spec in a pull request instead)."""
    from generator.cluster import delete_job, find_job
    from generator.cluster.argocd import refuse_if_managed

    target = _target(name, cluster, namespace)
    api, ns = _connect(target), target.namespace
    found = find_job(api, name, ns)
    if found is None:
        raise BadRequest(f"no rayjob, raycluster or job named {name!r} in {ns}")
    traits, live = found
    if not force:
        refuse_if_managed(target.root, target.cluster.name, ns, name, live, "delete")
    if traits.persistent:
        if not raycluster:
            raise BadRequest(f"{name} is a persistent RayCluster: pass --raycluster to delete it")
        if not yes and not confirm(f"delete RayCluster {ns}/{name} and its sentinel?"):
            raise cancelled(f"RayCluster {ns}/{name} kept")
    delete_job(api, traits, name, ns)
    out_console.print(f"deleted {traits.object_kind} {ns}/{name}")


def _kubectl_target(name: str, cluster: str | None, namespace: str | None,
                    role: str | None = None, rank: int | None = None) -> tuple[Any, Obj]:
    from generator.cluster.kubectl import Kubectl, select_pod
    from runtime.identity import selector
    from runtime.kube import POD

    target = _target(name, cluster, namespace)
    pods = _connect(target).list(POD, namespace=target.namespace, labels=selector(job=name))
    return (Kubectl(target.cluster.kube_context, target.namespace),
            select_pod(pods, role=role, rank=rank))


@app.command()
def shell(
    name: str, cluster: ClusterOption = None, namespace: NamespaceOption = None,
    rank: Annotated[int | None, typer.Option(help="Worker rank.")] = None,
    command: Annotated[str, typer.Option(help="Shell to start.")] = "/bin/bash",
    accelerator: Annotated[str | None, typer.Option(
        "--accelerator", "--accelerators",
        help="For a new development pod: accelerator type (none: a CPU pod).")] = None,
    gpus: Annotated[int | None, typer.Option(help="For a new development pod: GPUs.")] = None,
    image: Annotated[str, typer.Option(
        "--image", "--docker-image", help="For a new development pod: image.")] = "devbox",
    owner: Annotated[str | None, typer.Option(
        help="For a new development pod: owner e-mail (default: git config user.email).")
    ] = None,
    deadline: Annotated[str, typer.Option(help="For a new development pod: lifetime.")] = "8h",
    timeout: Annotated[int, typer.Option(help="Seconds to wait for a new pod.")] = 900,
) -> None:
    """Open a shell in a job's pod; without such a job, first start a development pod
    (a Job running `sleep infinity` until its deadline) and wait for it."""
    from generator.cluster.kubectl import Kubectl, main_container, select_pod
    from runtime.identity import selector
    from runtime.kube import POD

    target = _target(name, cluster, namespace)
    api, ns = _connect(target), target.namespace
    pods = api.list(POD, namespace=ns, labels=selector(job=name))
    if not pods:
        flags = {"name": name, "kind": "job", "cluster": target.cluster.name, "namespace": ns,
                 "image": image, "cmd": "sleep infinity", "deadline": deadline,
                 "accelerator": accelerator, "gpus": gpus,
                 "owner": owner or _default_owner(target.root)}
        pods = _start_dev_pod(api, target, {k: v for k, v in flags.items() if v is not None},
                              timeout)
    pod = select_pod(pods, rank=rank)
    kubectl = Kubectl(target.cluster.kube_context, ns)
    argv = kubectl.exec_argv(pod["metadata"]["name"], [command], main_container(pod), True)
    raise typer.Exit(kubectl.run(argv).returncode)


def _start_dev_pod(api: Kube, target: Target, flags: dict[str, Any], timeout: int) -> list[Obj]:
    from generator.cluster import SubmitRequest, apply_all, prepare
    from generator.cluster import manifests as render_manifests
    from generator.cluster.preflight import wait_running

    job = prepare(SubmitRequest(flags=flags, root=target.root), target.catalog, upload=False)
    for obj in apply_all(api, render_manifests(job, target.catalog)):
        out_console.print(f"started development pod: {obj['kind']} {job.namespace}/{job.name}")
    return wait_running(api, job.namespace, job.name, 1, timeout, err_console.print)


@app.command()
def cp(name: str, source: str, destination: str, cluster: ClusterOption = None,
       namespace: NamespaceOption = None,
       rank: Annotated[int | None, typer.Option(help="Worker rank.")] = None) -> None:
    """Copy files to or from a job's pod; write the pod side as `:PATH`."""
    from generator.cluster.kubectl import main_container

    kubectl, pod = _kubectl_target(name, cluster, namespace, rank=rank)
    pod_name = pod["metadata"]["name"]
    source, destination = (f"{pod_name}{p}" if p.startswith(":") else p
                           for p in (source, destination))
    kubectl.run(kubectl.cp_argv(source, destination, main_container(pod)), capture=True)


@app.command("port-forward")
def port_forward(name: str, cluster: ClusterOption = None, namespace: NamespaceOption = None,
                 service: Annotated[str, typer.Option(help="dashboard, client or gcs.")
                                    ] = "dashboard",
                 local_port: Annotated[int | None, typer.Option(help="Local port.")] = None,
                 ) -> None:
    """Forward a Ray head service (the dashboard by default) to localhost."""
    from generator.cluster.kubectl import SERVICES

    if service not in SERVICES:
        raise BadRequest(f"--service {service!r}: one of {', '.join(SERVICES)}")
    kubectl, pod = _kubectl_target(name, cluster, namespace, role="head")
    ports = [f"{local_port or SERVICES[service]}:{SERVICES[service]}"]
    raise typer.Exit(kubectl.run(kubectl.port_forward_argv(pod["metadata"]["name"], ports))
                     .returncode)


@app.command()
def check(
    nodes: Annotated[list[str] | None, typer.Argument(help="Nodes to check.")] = None,
    local: Annotated[bool, typer.Option("--local", help="Run the suite on this machine.")] = False,
    cluster: Annotated[str | None, typer.Option(
        autocompletion=_clusters,
        help="Cluster of the nodes (default: the one whose kube_context is current).")] = None,
    namespace: Annotated[str | None, typer.Option(
        "--namespace", "-n", help="Namespace of the check Jobs (default: the catalog's).")
    ] = None,
    accelerator: Annotated[str | None, typer.Option(
        help="The nodes' accelerator (catalog name), instead of reading their labels.")] = None,
    image: Annotated[str | None, typer.Option(
        help="Image with the runtime (default: the catalog's runtime image).")] = None,
    timeout: Annotated[int, typer.Option(help="Seconds to wait per node.")] = 900,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the Jobs only.")] = False,
    output: OutputOption = Output.table,
) -> None:
    """Run the preflight suite on nodes (as Jobs) or on this machine (--local)."""
    if local:
        return _report([_local_preflight()], output)
    if not nodes:
        raise BadRequest("name the NODE… to check, or pass --local")
    jobs, api = _node_check_jobs(nodes, cluster, namespace, accelerator, image, timeout,
                                 connect=not (accelerator and dry_run))
    if dry_run:
        import yaml

        return print(yaml.safe_dump_all(jobs, sort_keys=False), end="")
    from generator.cluster.preflight import run_on_node

    assert api is not None
    _report([run_on_node(api, job, timeout, err_console.print) for job in jobs], output)


def _node_check_jobs(nodes: list[str], cluster: str | None, namespace: str | None,
                     accelerator: str | None, image: str | None, timeout: int,
                     connect: bool) -> tuple[list[Obj], Kube | None]:
    """The check Job of each node, and the cluster's API (None when not `connect`)."""
    from generator.cluster.preflight import described_node, node_check_job
    from generator.cluster.target import Asked, find_cluster
    from generator.pods import RUNTIME_IMAGE
    from generator.repo import find_root
    from runtime.kube import NODE, Kube

    catalog, found = find_cluster(Asked(find_root(), None, cluster, None))
    api = Kube.connect(found.kube_context) if connect else None

    def node(name: str) -> Obj:
        if accelerator:
            return described_node(catalog, name, accelerator)
        assert api is not None
        return api.get(NODE, name)

    return [node_check_job(catalog, node(n), namespace, image or RUNTIME_IMAGE, timeout)
            for n in nodes], api


def _local_preflight() -> dict[str, Any]:
    from runtime.preflight import PreflightConfig, run_suite

    return run_suite(PreflightConfig()).model_dump()


def _report(results: list[dict[str, Any]], output: Output) -> None:
    from generator.errors import CheckFailed

    rows = [{"node": r["node"], "check": f["check"], "severity": f["severity"],
             "message": f["message"]} for r in results for f in r["findings"]]
    if output is Output.table:
        emit(rows, output, title="preflight", empty="no findings")
        for r in results:
            out_console.print(f"{r['node']}: {'PASSED' if r['passed'] else 'FAILED'}  "
                              + "  ".join(f"{k}={v}" for k, v in r["figures"].items()))
    else:
        emit(results, output)
    failed = [r["node"] for r in results if not r["passed"]]
    if failed:
        raise CheckFailed(f"preflight failed on {', '.join(failed)}")
