"""Telemetry (seed §8): one store of training metrics, fleet summaries, collective timings,
flight-recorder entries and events, every row carrying the identity of `runtime.identity`.

`store` opens the store from a DSN: the embedded default is chDB in `.gkr/telemetry/`, a
cluster's is its ClickHouse server over HTTP; the client code is the same. `writer` batches
rows off the training thread. The schema is SQL under `schema/`, the analyses SQL under `sql/`.
"""
