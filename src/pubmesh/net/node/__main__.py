"""``python -m pubmesh.net.node ARGS``: ``pubmesh node ARGS`` without the rest of the CLI."""

import sys

from pubmesh.net.node.process import main

sys.exit(main())
