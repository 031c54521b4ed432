"""pubmesh.stacks."""
