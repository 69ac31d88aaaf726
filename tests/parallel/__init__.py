"""Tests of parallelism from the layout (runtime.parallel), on gloo CPU ranks."""
