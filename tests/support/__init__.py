"""Helpers shared by the test suites: free ports, real processes, bounded waiting."""
