"""Test doubles, synthetic data and test helpers that the test suite and the benchmarks share.

Not shipped in any image and never imported by `generator` or `runtime` (an import contract in
pyproject.toml): `doubles/` stands in for parts that cannot run on these machines (the
Kubernetes API server, ClickHouse's HTTP interface), `synthetic` makes telemetry samples with
known stragglers, `warden` holds Warden's HTTP doubles, `wait` polls for a condition instead
of sleeping, and `ray` is the one local Ray session a test process shares."""
