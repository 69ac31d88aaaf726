"""Distributed checkpointing: async host staging, commit markers, retention, resharding."""
