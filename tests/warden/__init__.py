"""Warden tests: a real Temporal dev server and HTTP doubles of the cluster and cloud."""
