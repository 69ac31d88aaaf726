"""The tests of the shared test doubles (testing/doubles)."""
