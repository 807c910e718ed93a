"""The delivery plane: renderers, channels and the per-recipient delivery ledger.

==========================  ============================================================
``intake``                  the executor's outbox rows become renditions and ledger rows
``rendering``               the render queue: each rendition once, in a child process
``renderers/``              one ABC and the built-in formats; plug-ins by entry point
``channels/``               one ABC (capabilities, class methods) and the built-ins
``ledger/``                 claims, the decision, composition, sending, recording
``links``, ``unsubscribe``  signed links and one-click opt-outs
``queries``, ``commands``   what the CLI and the server read and change, tenant-scoped
``settings``                the environment: channels, signing keys, public URL
``worker``                  ``nbcast delivery-worker``: intake, reaper, renders, sends
==========================  ============================================================

See :mod:`nbcast.delivery.ledger` for how a succeeded run becomes deliveries.
"""

from __future__ import annotations

__all__: list[str] = []
