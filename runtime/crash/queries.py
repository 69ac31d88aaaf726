"""The telemetry queries a bundle lists: plain SQL under `sql/`, each taking the run's id.

A diagnosis runs them with `gkr telemetry sql -p run=<run> -- "$(cat telemetry/<name>.sql)"`;
the bundle keeps their text, not their results (but for the events around the failure), so
that the agent reads the store as it is, through credentials that can only read.
"""

from __future__ import annotations

from typing import Any

from runtime.telemetry.store import sql_file

# name -> what it answers; the files are sql/<name>.sql.
QUERIES = {
    "run_ranks": "where each rank got to: last step, loss, step times",
    "run_loss": "the loss curve and step time per step",
    "run_collectives": "each rank's collectives: count, mean and worst duration, last seq",
    "run_fleet": "the auxiliary services' FleetMonitor summaries",
    "run_flight_recorder": "the last collectives each rank's Flight Recorder saw",
    "run_events": "the run's events and those of its pods and nodes",
}


def sql(name: str) -> str:
    """The text of one query under `sql/`."""
    return sql_file(f"{name}.sql", "runtime.crash")


def listed(run_id: str) -> list[dict[str, Any]]:
    """The queries as a bundle lists them, with the command that runs each."""
    found = []
    for name, what in QUERIES.items():
        parameters = {"run": run_id} | ({"limit": "200"} if name == "run_events" else {})
        flags = " ".join(f"-p {key}={value}" for key, value in parameters.items())
        found.append({"name": name, "what": what, "file": f"telemetry/{name}.sql",
                      "parameters": parameters,
                      # `--`: the query starts with a comment, which is not an option
                      "command": f'gkr telemetry sql {flags} -- "$(cat telemetry/{name}.sql)"'})
    return found
