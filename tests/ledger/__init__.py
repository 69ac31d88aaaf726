"""The sample ledger (issue 24)."""
