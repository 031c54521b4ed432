"""pubmesh.proto."""
