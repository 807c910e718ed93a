"""Channels by name: ``email``, ``slack``, ``link``, ``webhook``; third parties add
theirs through the entry point group ``nbcast.channels`` (see :mod:`nbcast.registry`).

The registry is the one list of channel names: a definition may name any channel it
knows, and :func:`channel_class` gives the class whose class methods validate and
compare recipients and build the channel from the environment
(:class:`~nbcast.delivery.channels.base.Channel`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from nbcast.delivery.channels.base import Attachment, Channel, Message, Receipt
from nbcast.errors import ConfigError, NbcastError
from nbcast.plugins import channels, recipient_rules

if TYPE_CHECKING:
    from nbcast.delivery.settings import DeliverySettings

__all__ = [
    "Attachment",
    "Channel",
    "Message",
    "Receipt",
    "build_channels",
    "channel_class",
    "channels",
    "unconfigured_channels",
    "unconfigured_subscriptions",
]


def channel_class(name: str) -> type[Channel]:
    """The :class:`Channel` subclass registered as ``name``.

    A name that is not registered is a :class:`~nbcast.errors.ConfigError` listing
    the known ones. A factory that is not a :class:`Channel` subclass (a plain
    function) has none of the class methods of its own: :class:`Channel`'s defaults
    stand for it (no configuration from the environment, recipients compared as
    written)."""
    rules = recipient_rules(name)
    return rules if issubclass(rules, Channel) else Channel


def build_channels(
    settings: DeliverySettings, environ: Mapping[str, str] | None = None
) -> dict[str, Channel]:
    """Every registered channel that ``environ`` (default: the process environment)
    configures, by name: each channel's
    :meth:`~nbcast.delivery.channels.base.Channel.from_environment` says whether and
    how, so a plug-in channel is configured as a built-in one is (``link`` always).
    A channel whose configuration is malformed is a :class:`ConfigError` naming it."""
    env = os.environ if environ is None else environ
    built: dict[str, Channel] = {}
    for name in channels.names():
        try:
            channel = channel_class(name).from_environment(env, settings)
        except NbcastError:
            raise
        except Exception as exc:  # a plug-in's bug: say whose, on one line
            raise ConfigError(
                f"channel {name!r} could not be configured: {type(exc).__name__}: {str(exc)[:200]}"
            ) from exc
        if channel is not None:
            built[name] = channel
    return built


def unconfigured_channels(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The registered channels that ``environ`` (default: this process's) does not
    configure, each with what would (``NBCAST_SLACK_TOKEN``). Where nbcast's delivery
    worker runs elsewhere, its environment decides: this is what this process sees.
    Malformed settings count as configuring nothing."""
    from nbcast.delivery.settings import load_delivery_settings

    env = os.environ if environ is None else environ
    try:
        configured = set(build_channels(load_delivery_settings(env), env))
    except NbcastError:
        configured = set()
    return {
        name: channel_class(name).configured_by
        for name in channels.names()
        if name not in configured
    }


def unconfigured_subscriptions(
    subscriptions: Sequence[tuple[str, str]], environ: Mapping[str, str] | None = None
) -> list[str]:
    """One line per subscription — ``(channel, recipient)``, in the block's order — on a
    channel not configured here: publishing says so (its deliveries would fail
    ``no_channel`` until it is)."""
    missing = unconfigured_channels(environ)
    return [
        f"subscriptions[{index}]: the {channel} channel is not configured here "
        f"(set {missing[channel]}): deliveries to {to} fail no_channel until it is"
        for index, (channel, to) in enumerate(subscriptions)
        if channel in missing
    ]
