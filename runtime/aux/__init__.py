"""Auxiliary services (seed §5.2-§5.4): persistent Ray actors behind per-node proxies,
reached from training ranks over ZeroMQ.

Import the Ray-facing parts (`runtime.aux.coordinator`) only where Ray runs; the client,
wire format and queues import without it. Nothing is imported here, so that the config
(`runtime.aux.config`) loads without torch (`gkr validate` composes training configs).
"""
