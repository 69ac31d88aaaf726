"""Tests of the telemetry store, writers and analyses (runtime.telemetry)."""
