"""`python -m runtime.crash BUNDLE_URI -- COMMAND...`: the in-cluster diagnosis Job.

Fetches the bundle into the workspace, puts the run's code beside it, writes the prompt, runs
the agent's command, checks its report and writes the answer into the bundle's `diagnosis/`
folder, where `gkr diagnose show` reads it. The Job's pod holds no credential to push or
submit: its service account may only read the namespace's pods and logs, and its telemetry
DSN is the reader's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import zipfile
from pathlib import Path

import runtime
from runtime.crash.agent import DIAGNOSIS, agent_env, read_answer, run_agent, save_answer
from runtime.crash.display import visible
from runtime.crash.files import Folder, check_name, write_below
from runtime.crash.layout import Layout
from runtime.crash.prompt import write_prompt
from runtime.errors import RuntimeFailure
from runtime.identity import Env


def unpack_code(bundle: Path, code: Path) -> str:
    """The run's code in `code/`: the working-directory archive its bundle names when there is
    one, else the image's own code (the folder this `runtime` package is imported from); says
    which."""
    identity = json.loads((bundle / "code" / "identity.json").read_text()) \
        if (bundle / "code" / "identity.json").is_file() else {}
    archive = str(identity.get("working_dir") or "")
    if not archive.endswith(".zip"):
        image = Path(runtime.__file__).resolve().parents[1]
        code.symlink_to(image, target_is_directory=True)
        return f"the image's code ({image}; the run's own commit is {identity.get('commit')})"
    parent, _, name = archive.rpartition("/")
    check_name(name, parent)  # the identity is the bundle's: a name, not a path
    write_below(bundle.parent / "tmp", name, Folder(parent).read(name))
    # zipfile drops absolute and `..` parts of member names and makes no links (its docs:
    # ZipFile.extractall).
    with zipfile.ZipFile(bundle.parent / "tmp" / name) as packed:
        packed.extractall(code)
    return f"the working directory {archive}"


def main(argv: list[str]) -> int:
    """`python -m runtime.crash BUNDLE_URI [--workspace DIR] [--timeout S] -- COMMAND...`;
    exit 0 once a valid answer is in the bundle."""
    parser = argparse.ArgumentParser(
        prog="python -m runtime.crash", usage="%(prog)s BUNDLE_URI [--workspace DIR] "
        "[--timeout S] -- COMMAND...")
    parser.add_argument("bundle")
    parser.add_argument("--workspace", default="/workspace")
    parser.add_argument("--timeout", type=float, default=3600.0)
    split = argv.index("--") if "--" in argv else len(argv)
    args, command = parser.parse_args(argv[:split]), argv[split + 1:]
    if not command:
        parser.error("name the agent's command after --")
    layout = Layout(Path(args.workspace)).make()
    try:
        bundle = Folder(args.bundle)
        bundle.download(layout.bundle, skip=f"{DIAGNOSIS}/")
        run_id = write_prompt(layout, unpack_code(layout.bundle, layout.code), cluster=True)
        # The Job's pod holds no credential but the reader's and the agent's own: pass them.
        env = agent_env(layout, list(os.environ), os.environ.get(Env.TELEMETRY_DSN))
        report, patch = read_answer(layout, run_agent(command, layout, env, args.timeout),
                                    run_id)
        save_answer(bundle, layout, report, patch)
    except RuntimeFailure as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"diagnosis of {run_id}: {visible(report.root_cause)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
