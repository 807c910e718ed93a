"""The plug-in points every layer may name: the channel and renderer registries, and
what a definition asks of a channel without building it.

The registries live here, under the planes, because two planes read them: the
definitions plane checks that a block names only channels and formats that exist
(and each recipient against its channel's rules), the delivery plane builds and runs
them. Built-ins are ``"module:attribute"`` strings imported on first use, as a
third party's entry point is (:mod:`nbcast.registry`), so naming one here imports no
plane.

:class:`RecipientRules` is the part of a channel the definitions plane calls: class
methods on a subscription's ``to``. :class:`~nbcast.delivery.channels.base.Channel`
inherits it, so a plug-in channel is validated and compared like a built-in one; a
factory that is not such a class (a plain function) gets these defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nbcast.registry import Registry

__all__ = ["RecipientRules", "channels", "recipient_rules", "renderers"]


class RecipientRules:
    """How a channel judges and compares recipients, without an instance."""

    @classmethod
    def check_recipient(cls, to: str) -> str | None:
        """Why ``to`` cannot be a recipient of this channel, judged on its syntax
        alone (one line, naming it), or None. Called at publish; ``to`` is already a
        non-empty string of at most 512 characters without surrounding blanks."""
        return None

    @classmethod
    def check_recipient_here(cls, to: str, environ: Mapping[str, str]) -> str | None:
        """Why ``to`` cannot be reached from where nbcast runs (its configuration in
        ``environ``), or None. Called at publish after :meth:`check_recipient`."""
        return None

    @classmethod
    def normalize_recipient(cls, to: str) -> str:
        """The form in which ``to`` is compared with another recipient of this
        channel (a subscription may not list one twice, and an opt-out covers every
        spelling); by default ``to`` itself."""
        return to


channels: Registry[Any] = Registry(
    "channel",
    "nbcast.channels",
    {
        "email": "nbcast.delivery.channels.email:EmailChannel",
        "slack": "nbcast.delivery.channels.slack:SlackChannel",
        "link": "nbcast.delivery.channels.link:LinkChannel",
        "webhook": "nbcast.delivery.channels.webhook:WebhookChannel",
    },
)
"""The process-wide channel registry: ``channels.create("email", host=…)``."""

renderers: Registry[Any] = Registry(
    "renderer",
    "nbcast.renderers",
    {
        "html": "nbcast.delivery.renderers.html:HtmlRenderer",
        "pdf": "nbcast.delivery.renderers.pdf:PdfRenderer",
        "xlsx": "nbcast.delivery.renderers.xlsx:XlsxRenderer",
        "csv": "nbcast.delivery.renderers.csv:CsvRenderer",
    },
)
"""The process-wide renderer registry: ``renderers.create("pdf")``."""


def recipient_rules(name: str) -> type[RecipientRules]:
    """The recipient rules of the channel registered as ``name`` (its class, when it
    is a :class:`RecipientRules`; the defaults otherwise). An unknown name is a
    :class:`~nbcast.errors.ConfigError` listing the known ones."""
    factory = channels.factory(name)
    if isinstance(factory, type) and issubclass(factory, RecipientRules):
        return factory
    return RecipientRules
