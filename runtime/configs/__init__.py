"""Reusable Hydra config groups shipped with the runtime (found as `pkg://runtime.configs`)."""
