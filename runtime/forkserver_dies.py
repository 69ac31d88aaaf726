"""Imported in a multiprocessing forkserver (set_forkserver_preload, runtime.procs): the
server then dies with the process that started it, and so do the children it forked (each
sets its own death signal). Without this the server outlives a SIGKILLed parent: its
children hold the write end of its "alive" pipe (CPython's multiprocessing/forkserver.py),
so it never reads the EOF that would stop it, and they never lose their parent.

The race where the parent dies before this runs needs no check: the server then stops at
once, as its alive pipe's only writer is gone."""

from runtime.procs import die_with_parent

die_with_parent()
