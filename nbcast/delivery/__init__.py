"""The delivery plane: renderers, channels and the per-recipient delivery ledger.

See :mod:`nbcast.delivery.ledger` for how a succeeded run becomes deliveries.
"""
