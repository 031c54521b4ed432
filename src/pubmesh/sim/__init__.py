"""pubmesh.sim."""
