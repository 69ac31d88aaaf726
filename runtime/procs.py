"""Child processes that end with their parent, even when the parent is SIGKILLed (CI timeouts,
the OOM killer) and gets no chance to stop them.

Linux's parent-death signal (prctl(2), PR_SET_PDEATHSIG) has the kernel send SIGKILL to a
process when its parent exits. Two caveats from that man page, handled here:

* It is sent when the parent *thread* that forked the child exits, not the whole process:
  start children from a thread that outlives them (the one that waits for them).
* A parent that died before the child set it sends nothing: the child has been reparented
  already. So the child checks its parent right after setting it, and ends itself when the
  parent is gone.

The setting survives execve(2) (of a binary that is not set-user-ID) and is cleared in the
children of fork(2), so each process sets its own. Elsewhere than on Linux this is a no-op.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

PR_SET_PDEATHSIG = 1  # linux/prctl.h
FORKSERVER_PRELOAD = "runtime.forkserver_dies"  # set_forkserver_preload: see that module


def die_with_parent() -> None:
    """Have this multiprocessing child (a Process target, a pool's initializer) killed when
    the process that started it ends. Call it first."""
    if not _set_death_signal():
        return
    origin = multiprocessing.parent_process()
    if origin is not None and origin.pid is not None and not _started_by(origin.pid):
        os.kill(os.getpid(), signal.SIGKILL)


def tied_argv(argv: Sequence[str]) -> list[str]:
    """`argv` to run with subprocess so that it is killed when this process ends: a small
    Python step sets the death signal, checks this process is its parent and execs `argv`
    (the pid, process group and file descriptors stay those Popen made). Unlike Popen's
    preexec_fn, this is safe in a process with threads (Python's subprocess docs)."""
    if not sys.platform.startswith("linux"):
        return list(argv)
    # By path, isolated (-I: no script folder on sys.path), without site: stdlib only.
    return [sys.executable, "-I", "-S", __file__, str(os.getpid()), "--", *argv]


def _set_death_signal() -> bool:
    """Set SIGKILL as this process's parent-death signal; False where there is none."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    return True


def _started_by(origin: int) -> bool:
    """Whether `origin` is still this process's parent, or its grandparent through a
    multiprocessing forkserver (which forks the children of the process it serves)."""
    parent = os.getppid()
    return origin in (parent, _parent_of(parent))


def _parent_of(pid: int) -> int | None:
    """A process's parent from /proc/PID/stat (proc(5): the field after the state, which
    follows the name in parentheses), None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[1])


def _exec_tied(parent: int, argv: list[str]) -> None:
    """`python runtime/procs.py PARENT -- ARGV...`: what tied_argv runs."""
    _set_death_signal()
    if os.getppid() != parent:  # the parent died before the death signal was set
        raise SystemExit(1)
    try:
        os.execvp(argv[0], argv)
    except OSError as error:
        print(f"cannot start {argv[0]!r}: {error.strerror or error}", file=sys.stderr)
        raise SystemExit(127) from None


if __name__ == "__main__":
    _exec_tied(int(sys.argv[1]), sys.argv[3:])
