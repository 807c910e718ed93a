"""How a subscription's recipient is shown, and to whom: a URL may be a secret.

A webhook URL is usually its own credential — ``https://hooks.slack.com/services/
T…/B…/<token>`` posts to a channel for whoever knows it — and it is written in the
definition's ``nbcast`` block, copied into every ledger row and every signed link it
was given. So it is shown whole only to the tenant's **admins** (and operators, who
act as admins everywhere); authors and viewers see its scheme, host (and port) and
the last four characters of the rest: ``https://hooks.example.com/…a1b2``
(:func:`mask_url`). Email addresses and Slack channels are shown as they are.

**What counts as a URL.** Any recipient that is an absolute ``http(s)://`` URL,
whatever its channel: the ``webhook`` channel's, and a plug-in channel's that posts
to URLs (an incoming-webhook URL of another chat service holds the same kind of
secret). A signed link's recipient is its delivery's, so links made for a webhook
delivery are masked too.

**Where.** Once, in the read models, which build their records with the caller's
:class:`Disclosure` (:func:`disclosure`); every face — the CLI, the REST API, the
status pages, the JupyterLab extension through the API — serializes what it is
given:

- ledger rows (:class:`~nbcast.delivery.queries.DeliveryRecord`): the recipient, and
  any URL in the row's error message (a refused URL is quoted there);
- signed links (:class:`~nbcast.delivery.queries.LinkRecord`) and their openings;
- definitions and versions (:mod:`nbcast.definitions.queries`): the block's
  ``subscriptions[].to`` and the stored notebook's ``metadata.nbcast`` — so
  ``nbcast definitions show``, ``nbcast export``, the API's versions and every version
  diff (computed from those notebooks) show the masked form;
- a run's executed notebook, downloaded (:meth:`Disclosure.notebook_bytes`): it
  carries its version's ``metadata.nbcast`` block.

Not masked: the audit trail (only admins read it) and the delivery plane's own work
(the worker reads the rows themselves, never these records).

**Decisions.**

- *Diffs* compare the masked notebooks: to a non-admin, a webhook URL changed in its
  hidden middle shows as unchanged (that part is exactly what they may not see); an
  admin's diff shows the change.
- A masked notebook's bytes are not the stored ones, so they no longer hash to the
  version's (or the artifact's) ``sha256``, which is shown as stored.
- Two URLs of one definition that would be masked alike (same host, same last four
  characters) stay distinct: the second is shown with `` (2)`` after it, the third
  `` (3)``…, so a masked block still parses as a valid block.
- A masked URL cannot be published back: a non-admin who exports a version and
  publishes it again would otherwise subscribe a URL that goes nowhere; the webhook
  channel refuses one at publish
  (:meth:`~nbcast.delivery.channels.webhook.WebhookChannel.check_recipient_here`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from nbcast.access import Caller
from nbcast.tenancy.roles import Membership, Role, member

__all__ = [
    "ELLIPSIS",
    "Disclosure",
    "disclosure",
    "is_masked_url",
    "is_url",
    "mask_url",
]

ELLIPSIS = "\u2026"
"""What stands for the hidden part of a masked URL."""

SHOWN_TAIL = 4
"""Characters of a URL's end (after its host) shown to non-admins."""

_SCHEMES = ("http://", "https://")
_URL_IN_TEXT = re.compile(r"(?i)\bhttps?://[^\s'\"<>`]+")
_MASKED = re.compile(rf"(?i)https?://[^/?#\s]+/{ELLIPSIS}[^\s]{{0,{SHOWN_TAIL}}}(?: \(\d+\))?")


def is_url(recipient: str) -> bool:
    """Whether ``recipient`` is an absolute ``http(s)://`` URL (module docstring)."""
    return recipient[:8].lower().startswith(_SCHEMES)


def mask_url(url: str) -> str:
    """``url`` as non-admins see it: scheme, host (and port), an ellipsis and the last
    :data:`SHOWN_TAIL` characters of what follows the host —
    ``https://hooks.example.com/…a1b2``. A user name or password (never accepted in a
    subscription) is dropped; a URL that is only a host shows nothing after it."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    netloc, tail = rest[:end], rest[end:]
    host = netloc.rpartition("@")[2]
    return f"{scheme}://{host}/{ELLIPSIS}{tail.lstrip('/')[-SHOWN_TAIL:]}"


def is_masked_url(recipient: str) -> bool:
    """Whether ``recipient`` is a URL as :func:`mask_url` shows it (so not a URL that
    anything could be posted to)."""
    return _MASKED.fullmatch(recipient) is not None


@dataclass(frozen=True)
class Disclosure:
    """How recipients are shown to one caller: ``whole`` for the tenant's admins and
    operators, masked (:func:`mask_url`) for everyone else (module docstring)."""

    whole: bool

    @classmethod
    def for_member(cls, membership: Membership) -> Disclosure:
        """What ``membership`` may see: admins (and operators) see URLs whole."""
        return cls(whole=membership.may(Role.admin))

    def recipient(self, recipient: str) -> str:
        """``recipient`` as this caller sees it."""
        if self.whole or not is_url(recipient):
            return recipient
        return mask_url(recipient)

    def text(self, text: str) -> str:
        """``text`` (an error message, say) with every URL in it masked."""
        if self.whole:
            return text
        return _URL_IN_TEXT.sub(lambda found: mask_url(found.group()), text)

    def value(self, value: Any) -> Any:
        """``value`` (JSON: a row's error) with every URL in its strings masked."""
        if self.whole:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {key: self.value(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.value(item) for item in value]
        return value

    def block(self, block: dict[str, Any]) -> dict[str, Any]:
        """An ``nbcast`` block (a copy) with its subscriptions' URL recipients masked;
        masks that would coincide are numbered (module docstring)."""
        subscriptions = block.get("subscriptions")
        if self.whole or not isinstance(subscriptions, list):
            return dict(block)
        shown = _masks(subscriptions)
        masked = []
        for item in subscriptions:
            to = item.get("to") if isinstance(item, dict) else None
            if isinstance(to, str) and to in shown:
                item = {**item, "to": shown[to]}
            masked.append(item)
        return {**block, "subscriptions": masked}

    def notebook(self, notebook: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """``notebook`` with its ``metadata.nbcast`` block masked (:meth:`block`), and
        whether anything was; the notebook itself when nothing was."""
        metadata = notebook.get("metadata")
        found = metadata.get("nbcast") if isinstance(metadata, dict) else None
        if self.whole or not isinstance(found, dict):
            return notebook, False
        block = self.block(found)
        if block == found:
            return notebook, False
        assert isinstance(metadata, dict)
        return {**notebook, "metadata": {**metadata, "nbcast": block}}, True

    def notebook_json(self, text: str, block: dict[str, Any]) -> str:
        """A stored version's canonical notebook text, whose ``metadata.nbcast`` is
        ``block``, masked as :meth:`block` masks it: each URL recipient's JSON string
        is replaced by its mask's — what parsing, masking and writing the notebook
        again would give (keys are sorted, values do not move), without parsing a
        notebook of up to the publish limit for every version listed. The same URL
        anywhere else in the notebook as a whole string is masked with it."""
        subscriptions = block.get("subscriptions")
        if self.whole or not isinstance(subscriptions, list):
            return text
        for url, shown in _masks(subscriptions).items():
            text = text.replace(_json_string(url), _json_string(shown))
        return text

    def notebook_bytes(self, data: bytes) -> bytes:
        """An executed notebook's file, masked (:meth:`notebook`) and written as
        nbformat writes notebooks; bytes that are not a JSON object have every URL
        masked as text instead."""
        if self.whole:
            return data
        try:
            loaded = json.loads(data)
        except ValueError:  # UnicodeDecodeError included
            return self.text(data.decode("utf-8", "replace")).encode()
        if not isinstance(loaded, dict):
            return self.text(data.decode("utf-8", "replace")).encode()
        notebook, changed = self.notebook(loaded)
        if not changed:
            return data
        return (json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


def _masks(subscriptions: list[Any]) -> dict[str, str]:
    """Each URL recipient of ``subscriptions`` and how it is shown masked: URLs whose
    masks coincide are numbered in the order they come, `` (2)`` on."""
    alike: dict[str, int] = {}
    shown: dict[str, str] = {}
    for item in subscriptions:
        to = item.get("to") if isinstance(item, dict) else None
        if isinstance(to, str) and is_url(to) and to not in shown:
            mask = mask_url(to)
            alike[mask] = alike.get(mask, 0) + 1
            shown[to] = mask if alike[mask] == 1 else f"{mask} ({alike[mask]})"
    return shown


def _json_string(text: str) -> str:
    """``text`` as canonical notebook JSON writes a string
    (:func:`~nbcast.definitions.notebook.canonical_json`)."""
    return json.dumps(text, ensure_ascii=False)


def disclosure(session: Session, caller: Caller) -> Disclosure:
    """How recipients are shown to ``caller`` in their tenant: by their role
    (:func:`~nbcast.tenancy.roles.member`, which refuses a caller with none)."""
    return Disclosure.for_member(member(session, caller))
