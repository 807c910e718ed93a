"""A supervised child's start on Linux: ``python -m nbcast.server_extension.child
<server pid> <nbcast arguments>`` (:mod:`nbcast.server_extension.services`).

It asks Linux for SIGTERM when the server's thread that started it dies
(``PR_SET_PDEATHSIG``, set here rather than in a ``preexec_fn``, which is unsafe in a
server that has threads), gives up at once if the server is already gone (it died
before the request took effect), then runs nbcast's CLI in this process. A module of
its own, at the top of the import graph: the supervisor names it, never imports it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Sequence

__all__ = ["child_main"]

_PR_SET_PDEATHSIG = 1


def child_main(argv: Sequence[str]) -> int:
    """Run ``argv[1:]`` as the nbcast CLI while server ``argv[0]`` lives (module doc)."""
    import ctypes

    with contextlib.suppress(Exception):  # no prctl (not glibc): the stop hook remains
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if not argv or not argv[0].isdigit() or os.getppid() != int(argv[0]):
        return 0
    from nbcast.cli import main

    return main(list(argv[1:]))


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
