"""pubmesh.net."""
