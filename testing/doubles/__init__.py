"""Test doubles for parts that cannot run on these machines: the Kubernetes API server and
ClickHouse's HTTP interface."""
