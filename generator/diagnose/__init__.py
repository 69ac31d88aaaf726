"""`gkr diagnose`: an agent's diagnosis of a failed run, applied only once a person approves.

`workspace` makes the agent's isolated workspace (the bundle, and a shared clone of the run's
code with its recorded changes: a clone has its own refs and no remote, so nothing the agent
does there reaches the user's repository); `flow` runs the agent and keeps its answer beside
the bundle, and approves (a branch built through `submit --gitops`'s git path, then a
relaunch from the run's last checkpoint) or rejects it; `job` renders the in-cluster Job.
"""
