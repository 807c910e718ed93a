"""nbcast: scheduled, versioned, audited analytics reports from Jupyter notebooks.

Importing ``nbcast`` is cheap on purpose (it runs inside every kernel and Ray
worker): subpackages are imported when first used.
"""

from __future__ import annotations

__all__ = ["NbcastError", "__version__"]

__version__ = "0.1.0"

from nbcast.errors import NbcastError
