"""pubmesh.trace."""
