"""Test doubles shared by several suites, for parts that cannot run on these machines."""
