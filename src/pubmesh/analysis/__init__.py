"""pubmesh.analysis."""
