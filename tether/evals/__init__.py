"""Evaluation: BFCL and scenario suites, bare vs guarded."""
