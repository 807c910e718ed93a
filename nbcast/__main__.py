"""``python -m nbcast``: the same as the ``nbcast`` command."""

from __future__ import annotations

import sys

from nbcast.cli import main

sys.exit(main())
