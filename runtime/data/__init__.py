"""Per-rank data loader pipeline with a deterministic, resumable global schedule."""
