"""`gkr submit/list/status/logs/delete/shell/cp/port-forward/check`: thin commands over
`generator.cluster` (flags -> frozen request -> one call)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from generator.catalog import Catalog, Cluster
from generator.cli._app import app, err_console, out_console
from generator.cli._output import Output, OutputOption, emit
from generator.cluster import (
    SubmitRequest,
    apply_all,
    delete_job,
    job_status,
    list_jobs,
    prepare,
)
from generator.cluster import manifests as render_manifests
from generator.cluster.gitops import submit_gitops
from generator.cluster.kubectl import SERVICES, Kubectl, main_container, select_pod
from generator.cluster.preflight import (
    described_node,
    exec_preflight,
    expected_pods,
    node_check_job,
    pod_expectations,
    run_on_node,
    wait_running,
)
from generator.errors import BadRequest, CheckFailed
from generator.kinds import KINDS
from generator.pods import RUNTIME_IMAGE
from generator.repo import find_root
from generator.resolve import ResolvedJob
from generator.spec import Kind
from runtime.identity import Label, Role, selector
from runtime.kube import NODE, POD, Kube

ClusterOption = Annotated[str, typer.Option("--cluster", help="Cluster from clusters/.")]
NamespaceOption = Annotated[str | None, typer.Option(
    "--namespace", "-n", help="Namespace (default: every team namespace of the cluster).")]


def _cluster(name: str) -> tuple[Catalog, Cluster]:
    catalog = Catalog(find_root())
    cluster = catalog.clusters.get(name)
    if cluster is None:
        known = ", ".join(sorted(catalog.clusters))
        raise BadRequest(f"--cluster {name!r}: unknown; known: {known}")
    return catalog, cluster


def _namespace(cluster: Cluster, namespace: str | None) -> str:
    if namespace:
        return namespace
    if len(cluster.teams) == 1:
        return next(iter(cluster.teams.values())).namespace
    raise BadRequest(f"--namespace is needed on {cluster.name}: "
                     + ", ".join(t.namespace for t in cluster.teams.values()))


@app.command()
def submit(
    name: Annotated[str | None, typer.Argument(help="Job name (default: the spec's).")] = None,
    kind: Annotated[Kind | None, typer.Argument(help="rayjob, raycluster or job.")] = None,
    spec_file: Annotated[Path | None, typer.Option("-f", "--file", help="A job spec YAML.")] = None,
    cluster: Annotated[str | None, typer.Option(help="Target cluster.")] = None,
    namespace: Annotated[str | None, typer.Option(help="Team namespace.")] = None,
    pods: Annotated[int | None, typer.Option(help="GPU pods.")] = None,
    gpus: Annotated[int | None, typer.Option(help="GPUs per pod.")] = None,
    cpus: Annotated[float | None, typer.Option(help="CPUs per pod.")] = None,
    memory: Annotated[str | None, typer.Option(help="Memory per pod, e.g. 512Gi.")] = None,
    accelerators: Annotated[str | None, typer.Option(help="Accelerator type.")] = None,
    docker_image: Annotated[str | None, typer.Option(help="Image name or pinned ref.")] = None,
    working_dir: Annotated[str | None, typer.Option(help="Local folder to ship, or a path/URI."
                                                    )] = None,
    env: Annotated[Path | None, typer.Option(help="YAML file of environment variables.")] = None,
    preemptible: Annotated[bool | None, typer.Option("--preemptible", help="Low priority."
                                                     )] = None,
    cmd: Annotated[str | None, typer.Option(help="Command to run.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the manifests only.")] = False,
    gitops: Annotated[bool, typer.Option("--gitops", help="Commit the spec on a new branch."
                                         )] = False,
    preflight: Annotated[bool, typer.Option(help="Wait for the pods and run the preflight."
                                            )] = True,
    teardown: Annotated[bool | None, typer.Option(
        "--yes/--no", help="On a failed preflight, tear down without asking (--yes) or keep (--no)."
    )] = None,
    timeout: Annotated[int, typer.Option(help="Seconds to wait for the pods.")] = 1800,
) -> None:
    """Submit a rayjob, raycluster or job (flags override -f values), by server-side apply."""
    values = {"name": name, "kind": kind, "cluster": cluster, "namespace": namespace,
              "pods": pods, "gpus": gpus, "cpus": cpus, "memory": memory,
              "accelerator": accelerators, "image": docker_image, "working_dir": working_dir,
              "env_file": str(env) if env else None, "preemptible": preemptible, "cmd": cmd}
    flags = {k: (int(v) if k == "cpus" and float(v).is_integer() else v)
             for k, v in values.items() if v is not None}
    root = find_root()
    request = SubmitRequest(flags=flags, spec_file=spec_file, root=root)
    catalog = Catalog(root)
    job = prepare(request, catalog, upload=not (dry_run or gitops))
    documents = render_manifests(job, catalog)
    if dry_run:
        print(yaml.safe_dump_all(documents, sort_keys=False), end="")
    elif gitops:
        branch, sha = submit_gitops(root, job, env.resolve() if env else None)
        out_console.print(f"committed {sha[:10]} on branch {branch}: push it and open a PR")
    else:
        api = Kube.connect(job.cluster.kube_context)
        for obj in apply_all(api, documents):
            meta = obj["metadata"]
            out_console.print(f"applied {obj['kind']} {meta['namespace']}/{meta['name']} "
                              f"(resourceVersion {meta['resourceVersion']})")
        if preflight:
            _preflight_after_submit(api, job, timeout, teardown)


def _preflight_after_submit(api: Kube, job: ResolvedJob, timeout: int,
                            teardown: bool | None) -> None:
    """Seed §2.4: check the placed pods; on a fault offer to tear the job down."""
    pods = wait_running(api, job.namespace, job.name, expected_pods(job), timeout,
                        lambda line: err_console.print(line))
    kubectl = Kubectl(job.cluster.kube_context, job.namespace)
    expect = pod_expectations(job)
    results = [exec_preflight(kubectl, pod, expect) for pod in pods
               if (pod["metadata"].get("labels") or {}).get(Label.ROLE) in (Role.WORKER, Role.JOB)]
    try:
        _report(results, Output.table)
    except CheckFailed:
        if teardown is None:
            teardown = typer.confirm(f"tear down {job.kind} {job.namespace}/{job.name}?")
        if teardown:
            delete_job(api, job.traits, job.name, job.namespace)
            out_console.print(f"deleted {job.kind} {job.namespace}/{job.name}")
        raise


@app.command("list")
def list_command(cluster: ClusterOption, namespace: NamespaceOption = None,
                 output: OutputOption = Output.table) -> None:
    """Jobs that gkr submitted, with phase, age and owner."""
    _, found = _cluster(cluster)
    namespaces = [namespace] if namespace else [t.namespace for t in found.teams.values()]
    rows = list_jobs(Kube.connect(found.kube_context), namespaces)
    emit([r.model_dump() for r in rows], output, title=f"jobs on {cluster}")


@app.command()
def status(name: str, cluster: ClusterOption, namespace: NamespaceOption = None,
           output: OutputOption = Output.table) -> None:
    """Phase, pods with their nodes, pending reasons from events, Kueue admission, age."""
    _, found = _cluster(cluster)
    report = job_status(Kube.connect(found.kube_context), _namespace(found, namespace), name)
    if output is not Output.table:
        emit([report.model_dump()], output)
        return
    out_console.print(f"{report.kind} {report.namespace}/{report.name}: {report.phase}, "
                      f"age {report.age}, Kueue: {report.admission}")
    emit([p.model_dump() for p in report.pods], output, title="pods")
    for reason in report.pending:
        out_console.print(f"  pending: {reason}")


@app.command()
def logs(
    name: str, cluster: ClusterOption, namespace: NamespaceOption = None,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Stream new lines.")] = False,
    pod: Annotated[str | None, typer.Option("--pod", help="Pod name.")] = None,
    rank: Annotated[int | None, typer.Option("--rank", help="Worker rank.")] = None,
    tail: Annotated[int | None, typer.Option("--tail", help="Last N lines.")] = None,
) -> None:
    """Logs of a job's head (or Job pod), a named pod, or a worker by rank."""
    _, found = _cluster(cluster)
    api, ns = Kube.connect(found.kube_context), _namespace(found, namespace)
    pods = api.list(POD, namespace=ns, labels=selector(job=name))
    chosen = select_pod(pods, rank=rank, name=pod)
    for line in api.logs(chosen["metadata"]["name"], namespace=ns,
                         container=main_container(chosen), follow=follow, tail=tail):
        print(line, flush=True)


@app.command()
def delete(
    name: str, cluster: ClusterOption, namespace: NamespaceOption = None,
    raycluster: Annotated[bool, typer.Option(
        "--raycluster", help="Required to delete a persistent RayCluster and its sentinel.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
) -> None:
    """Delete a job; a persistent RayCluster only with --raycluster and confirmation."""
    _, found = _cluster(cluster)
    api, ns = Kube.connect(found.kube_context), _namespace(found, namespace)
    for traits in KINDS.values():
        if api.find(api.kind(traits.api_version, traits.object_kind), name, namespace=ns) is None:
            continue
        if traits.persistent:
            if not raycluster:
                raise BadRequest(f"{name} is a persistent RayCluster: "
                                 "pass --raycluster to delete it")
            if not yes and not typer.confirm(f"delete RayCluster {ns}/{name} and its sentinel?"):
                raise typer.Exit(1)
        delete_job(api, traits, name, ns)
        out_console.print(f"deleted {traits.object_kind} {ns}/{name}")
        return
    raise BadRequest(f"no rayjob, raycluster or job named {name!r} in {ns}")


def _kubectl_target(name: str, cluster: str, namespace: str | None, role: str | None = None,
                    rank: int | None = None) -> tuple[Kubectl, dict[str, Any]]:
    _, found = _cluster(cluster)
    ns = _namespace(found, namespace)
    pods = Kube.connect(found.kube_context).list(POD, namespace=ns, labels=selector(job=name))
    return Kubectl(found.kube_context, ns), select_pod(pods, role=role, rank=rank)


@app.command()
def shell(
    name: str, cluster: ClusterOption, namespace: NamespaceOption = None,
    rank: Annotated[int | None, typer.Option(help="Worker rank.")] = None,
    command: Annotated[str, typer.Option(help="Shell to start.")] = "/bin/bash",
    accelerators: Annotated[str | None, typer.Option(
        help="For a new development pod: accelerator type (none: a CPU pod).")] = None,
    gpus: Annotated[int | None, typer.Option(help="For a new development pod: GPUs.")] = None,
    docker_image: Annotated[str, typer.Option(help="For a new development pod: image."
                                              )] = "devbox",
    deadline: Annotated[str, typer.Option(help="For a new development pod: lifetime.")] = "8h",
    timeout: Annotated[int, typer.Option(help="Seconds to wait for a new pod.")] = 900,
) -> None:
    """Open a shell in a job's pod; without such a job, first start a development pod
    (a Job running `sleep infinity` until its deadline) and wait for it."""
    catalog, found = _cluster(cluster)
    ns = _namespace(found, namespace)
    api = Kube.connect(found.kube_context)
    pods = api.list(POD, namespace=ns, labels=selector(job=name))
    if not pods:
        flags = {"name": name, "kind": "job", "cluster": cluster, "namespace": ns,
                 "image": docker_image, "cmd": "sleep infinity", "deadline": deadline,
                 "accelerator": accelerators, "gpus": gpus}
        request = SubmitRequest(flags={k: v for k, v in flags.items() if v is not None},
                                root=find_root())
        job = prepare(request, catalog, upload=False)
        for obj in apply_all(api, render_manifests(job, catalog)):
            out_console.print(f"started development pod: {obj['kind']} {ns}/{name}")
        pods = wait_running(api, ns, name, 1, timeout, lambda line: err_console.print(line))
    pod = select_pod(pods, rank=rank)
    kubectl = Kubectl(found.kube_context, ns)
    argv = kubectl.exec_argv(pod["metadata"]["name"], [command], main_container(pod), True)
    raise typer.Exit(kubectl.run(argv).returncode)


@app.command()
def cp(name: str, source: str, destination: str, cluster: ClusterOption,
       namespace: NamespaceOption = None,
       rank: Annotated[int | None, typer.Option(help="Worker rank.")] = None) -> None:
    """Copy files to or from a job's pod; write the pod side as `:PATH`."""
    kubectl, pod = _kubectl_target(name, cluster, namespace, rank=rank)
    pod_name = pod["metadata"]["name"]
    source, destination = (f"{pod_name}{p}" if p.startswith(":") else p
                           for p in (source, destination))
    kubectl.run(kubectl.cp_argv(source, destination, main_container(pod)), capture=True)


@app.command("port-forward")
def port_forward(name: str, cluster: ClusterOption, namespace: NamespaceOption = None,
                 service: Annotated[str, typer.Option(help="dashboard, client or gcs.")
                                    ] = "dashboard",
                 local_port: Annotated[int | None, typer.Option(help="Local port.")] = None,
                 ) -> None:
    """Forward a Ray head service (the dashboard by default) to localhost."""
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
    cluster: Annotated[str | None, typer.Option(help="Cluster of the nodes.")] = None,
    namespace: NamespaceOption = None,
    accelerator: Annotated[str | None, typer.Option(
        help="The nodes' accelerator (catalog name), instead of reading their labels.")] = None,
    image: Annotated[str, typer.Option(help="Image with the runtime.")] = RUNTIME_IMAGE,
    timeout: Annotated[int, typer.Option(help="Seconds to wait per node.")] = 900,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the Jobs only.")] = False,
    output: OutputOption = Output.table,
) -> None:
    """Run the preflight suite on nodes (as Jobs) or on this machine (--local)."""
    if local:
        return _report([_local_preflight()], output)
    if not (nodes and cluster):
        raise BadRequest("name NODE… and --cluster, or pass --local")
    catalog, found = _cluster(cluster)
    api = None if accelerator and dry_run else Kube.connect(found.kube_context)

    def node(name: str) -> dict[str, Any]:
        if accelerator:
            return described_node(catalog, name, accelerator)
        assert api is not None
        return api.get(NODE, name)

    jobs = [node_check_job(catalog, node(n), namespace, image, timeout) for n in nodes]
    if dry_run:
        return print(yaml.safe_dump_all(jobs, sort_keys=False), end="")
    assert api is not None
    _report([run_on_node(api, job, timeout, err_console.print) for job in jobs], output)


def _local_preflight() -> dict[str, Any]:
    from runtime.preflight import PreflightConfig, run_suite

    return run_suite(PreflightConfig()).model_dump()


def _report(results: list[dict[str, Any]], output: Output) -> None:
    rows = [{"node": r["node"], "check": f["check"], "severity": f["severity"],
             "message": f["message"]} for r in results for f in r["findings"]]
    if output is Output.table:
        emit(rows, output, title="preflight")
        for r in results:
            out_console.print(f"{r['node']}: {'PASSED' if r['passed'] else 'FAILED'}  "
                              + "  ".join(f"{k}={v}" for k, v in r["figures"].items()))
    else:
        emit(results, output)
    failed = [r["node"] for r in results if not r["passed"]]
    if failed:
        raise CheckFailed(f"preflight failed on {', '.join(failed)}")
