"""Declarative workflows, step enforcement and context compaction."""
