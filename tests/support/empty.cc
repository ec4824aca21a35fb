// Keeps driftd_test_support a valid library while it has no other sources.
