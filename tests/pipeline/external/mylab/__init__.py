"""A researcher's own package, outside ddmrl (copied into a workspace by tests/pipeline/test_external_members.py)."""
