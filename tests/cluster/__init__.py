"""`gkr` cluster commands, preflight and sentinel tests."""
