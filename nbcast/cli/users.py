"""``nbcast users``: the members of a tenant and their roles; operators.

Acts in the tenant named by ``--tenant`` (or ``NBCAST_TENANT``) as the OS user
``NBCAST_USER`` (default: the login name); see :mod:`nbcast.tenancy.roles` for who
may do what. NAME is an identity (:mod:`nbcast.access`): ``ada`` is the OS user ada,
who acts through this command; ``jupyter:alice`` is the user alice of the server
(jupyter-server's identity provider). The two never share a role.
"""

from __future__ import annotations

import click

from nbcast.cli.app import AppContext, pass_app
from nbcast.cli.output import emit_json, table

__all__: list[str] = []

ROLES = click.Choice(["viewer", "author", "admin"])


@click.group()
def users() -> None:
    """Members of the tenant and their roles (admin, author, viewer).

    NAME is an OS user (ada: whoever acts as NBCAST_USER=ada) or a user of the
    server, written jupyter:NAME (jupyter:alice)."""


@users.command("add")
@click.argument("name")
@click.option("--role", type=ROLES, default="viewer", show_default=True, help="Their role.")
@click.option("--email", default=None, help="Where SLA alerts for their reports go.")
@pass_app
def users_add(app: AppContext, name: str, role: str, email: str | None) -> None:
    """Add NAME to the tenant (admins); jupyter:NAME for a user of the server."""
    from nbcast.tenancy.members import add_member

    member = add_member(app.db, app.clock, app.caller, name, role, email)
    click.echo(f"{member.name} is a {member.role} in tenant {member.tenant}")


@users.command("grant")
@click.argument("name")
@click.argument("role", type=click.Choice(["viewer", "author", "admin", "operator"]))
@pass_app
def users_grant(app: AppContext, name: str, role: str) -> None:
    """Give member NAME the ROLE (admins), or make NAME an operator (operators)."""
    from nbcast.tenancy.members import grant_operator, set_role

    if role == "operator":
        new = grant_operator(app.db, app.clock, app.caller, name)
        click.echo(f"{name} {'is now' if new else 'was already'} an operator")
        return
    member = set_role(app.db, app.clock, app.caller, name, role)
    click.echo(f"{member.name} is a {member.role} in tenant {member.tenant}")


@users.command("revoke")
@click.argument("name")
@click.option("--operator", is_flag=True, help="Take the operator role instead (operators).")
@pass_app
def users_revoke(app: AppContext, name: str, operator: bool) -> None:
    """Remove NAME from the tenant (admins; never its last admin)."""
    from nbcast.tenancy.members import remove_member, revoke_operator

    if operator:
        revoke_operator(app.db, app.clock, app.caller, name)
        click.echo(f"{name} is no longer an operator")
        return
    remove_member(app.db, app.clock, app.caller, name)
    click.echo(f"{name} is no longer a member of tenant {app.caller.tenant}")


@users.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def users_list(app: AppContext, as_json: bool) -> None:
    """The tenant's members (any member)."""
    from nbcast.tenancy.members import list_members

    with app.db.session() as session:
        members = list_members(session, app.caller, app.clock.now())
    if as_json:
        emit_json([m.to_json() for m in members])
        return
    table(
        f"members of {app.caller.tenant}",
        ["user", "role", "operator", "email", "added", "added by"],
        [
            (
                m.name,
                m.role,
                "yes" if m.operator else "",
                m.email or "",
                m.added_at.strftime("%Y-%m-%d"),
                m.added_by or "",
            )
            for m in members
        ],
    )


COMMANDS = [users]
"""The commands this module adds to ``nbcast``."""
