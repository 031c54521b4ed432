"""``python -m pubmesh``: the same as the ``pubmesh`` command."""

import sys

from pubmesh.cli import main

sys.exit(main())
