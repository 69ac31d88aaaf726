"""Tests of the built-in models (runtime.models)."""
