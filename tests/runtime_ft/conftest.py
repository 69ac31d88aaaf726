"""The fault-tolerance tests run on the test process's shared local Ray (the `local_ray`
fixture of tests/conftest.py, testing/ray.py), whose workers import the checkout: the
loader's producers import the fault-injecting dataset from there."""
