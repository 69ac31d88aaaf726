"""Crash bundles (seed §7.4): what a failed run leaves for whoever diagnoses it.

When a run fails, every rank that raised writes its own report (its identity, exception,
traceback, last log lines and Flight Recorder buffer: `capture`), and the driver then writes
the bundle around them (`bundle`): the failure as Ray Train reported it, the tail of every
rank's and service's log, the resolved config and how the run was started, the code identity,
the run's events and the telemetry queries that fetch its metrics. The bundle is complete once
its `bundle.json` exists, as a checkpoint is once its marker does. Writing one is bounded in
size and time and never raises over the run's own error.

`report` defines what a diagnosing agent answers, `prompt` what it is told, `agent` how it is
run (locally by `gkr diagnose`, in a cluster by `python -m runtime.crash.agent`).
"""
