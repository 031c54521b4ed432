"""Helpers the tests share: stacks, node processes, figure checks (not tests themselves)."""
