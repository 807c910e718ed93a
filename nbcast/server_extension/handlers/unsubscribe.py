"""``/nbcast/unsubscribe/<token>``: one-click unsubscribe (RFC 8058) and its page.

Every email nbcast sends carries ``List-Unsubscribe: <…/nbcast/unsubscribe/<token>>``
and ``List-Unsubscribe-Post: List-Unsubscribe=One-Click``
(:mod:`nbcast.delivery.unsubscribe`). The token is signed and names the tenant,
report, channel and recipient, so — like a signed link — it is the authority: no
login, no XSRF cookie (a mail provider posts it from its own servers, with no
cookie and no session; the signature is what a cookie would prove). Both methods
are ``@allow_unauthenticated``, rate limited per address, and refuse a tampered or
malformed token with a 403 page.

- ``POST`` with the body ``List-Unsubscribe=One-Click`` (form-encoded or
  multipart, as RFC 8058 allows) records the opt-out through the delivery plane's
  command (:func:`nbcast.delivery.commands.unsubscribe_with_token`, source
  ``one-click``) and answers 200; later deliveries of that report to that recipient
  on that channel end SUPPRESSED ``unsubscribed``. Any other body is a 400 and
  records nothing. Posting twice is harmless (the opt-out is recorded once).
- ``GET`` changes nothing — mail scanners and link previewers fetch every URL in a
  message — and shows a confirmation page whose button makes that POST.
"""

from __future__ import annotations

from jupyter_server.auth.decorator import allow_unauthenticated
from tornado.web import HTTPError

from nbcast.delivery.commands import unsubscribe_with_token
from nbcast.delivery.link_opens import MAX_TOKEN_CHARS
from nbcast.delivery.unsubscribe import ALL_REPORTS, PURPOSE
from nbcast.errors import LinkError
from nbcast.server_extension.handlers.links import PublicHandler, page
from nbcast.server_extension.routes import Operation, route

__all__ = ["ONE_CLICK", "UnsubscribeHandler"]

ONE_CLICK = "One-Click"
"""The value of the ``List-Unsubscribe`` body field RFC 8058 requires."""

PAGE_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
"""The confirmation page's policy: no script, nothing fetched, posts only here."""


@route(
    "/nbcast/unsubscribe/{token}",
    Operation("get", "A confirmation page (changes nothing)", tag="unsubscribe"),
    Operation("post", "One-click unsubscribe (RFC 8058)", tag="unsubscribe"),
    documented=False,
)
class UnsubscribeHandler(PublicHandler):
    """One-click unsubscribe (module docstring)."""

    def check_xsrf_cookie(self) -> None:
        """No XSRF cookie: the signed token is the proof (module docstring)."""
        return None

    def _named(self, token: str) -> dict[str, object]:
        """What ``token`` names, if its signature verifies; a 403 otherwise.
        Nothing is written."""
        if len(token) > MAX_TOKEN_CHARS:
            raise HTTPError(403, reason="This link is not valid")
        try:
            payload = self.state.signer.verify(token, purpose=PURPOSE)
        except LinkError:
            raise HTTPError(403, reason="This link is not valid") from None
        if not all(isinstance(payload.get(k), (str, int)) for k in ("t", "s", "c", "r")):
            raise HTTPError(403, reason="This link is not valid")
        return payload

    @allow_unauthenticated
    async def get(self, token: str) -> None:
        """The confirmation page; a GET never unsubscribes."""
        self.rate_limit()
        named = self._named(token)
        scope = str(named["s"])
        what = "every report" if scope == ALL_REPORTS else f"the report “{scope}”"
        form = (
            '<form method="post">'
            f'<input type="hidden" name="List-Unsubscribe" value="{ONE_CLICK}">'
            "<button type=submit>Unsubscribe</button></form>"
        )
        self.set_header("Content-Type", "text/html; charset=UTF-8")
        self.set_header("Content-Security-Policy", PAGE_POLICY)
        self.finish(
            page(
                "Unsubscribe?",
                f"Stop sending {what} to {named['r']} ({named['c']}).",
                form,
            )
        )

    @allow_unauthenticated
    async def post(self, token: str) -> None:
        """Record the opt-out (RFC 8058 one-click)."""
        self.rate_limit()
        if self.get_body_argument("List-Unsubscribe", None) != ONE_CLICK:
            raise HTTPError(400, reason="Bad request")
        self._named(token)
        state = self.state
        try:
            done = await self.call(
                unsubscribe_with_token,
                state.db,
                state.clock,
                None,
                token,
                source="one-click",
                signer=state.signer,
            )
        except LinkError:
            raise HTTPError(403, reason="This link is not valid") from None
        what = "every report" if done.scope == ALL_REPORTS else f"the report “{done.scope}”"
        self.set_header("Content-Type", "text/html; charset=UTF-8")
        self.finish(page("Unsubscribed", f"{done.recipient} will no longer receive {what}."))
