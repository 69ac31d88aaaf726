"""Reusable parallelism layouts (Hydra group `layout`)."""
