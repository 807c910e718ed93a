"""Report definitions: ``publish``, ``definitions list|show``, ``versions``, ``diff``,
``export``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from nbcast.access import Caller, Source
from nbcast.cli.app import VERSION, AppContext, pass_app
from nbcast.cli.output import emit_json, table, when

__all__: list[str] = []


def _channel_warnings(prepared: Any) -> list[str]:
    """A line per subscription on a channel this environment does not configure."""
    from nbcast.delivery.channels import unconfigured_subscriptions

    return unconfigured_subscriptions([(s.channel, s.to) for s in prepared.spec.subscriptions])


@click.command()
@click.argument("path", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--name", help="Definition name (default: metadata 'name', else file stem).")
@click.option("-m", "--message", default="", help="What changed in this version.")
@click.option("--author", envvar="NBCAST_USER", default=None, help="Author to record.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_app
def publish(
    app: AppContext, path: Path, name: str | None, message: str, author: str | None, as_json: bool
) -> None:
    """Publish the notebook PATH as a new immutable version."""
    from nbcast.definitions.versions import prepare
    from nbcast.definitions.versions import publish as do_publish

    prepared = prepare(path, name)  # validate everything before the database is opened
    result = do_publish(
        app.db,
        prepared,
        caller=Caller.of(  # an OS identity, as every command's (AppContext.caller)
            tenant=app.settings.tenant, name=author or app.settings.user, source=Source.os
        ),
        name=name,
        message=message,
        now=app.clock.now(),
    )
    warnings = [*result.warnings, *_channel_warnings(prepared)]
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        emit_json(
            {
                "definition": result.definition,
                "version": result.version,
                "sha256": result.sha256,
                "created": result.created,
                "warnings": warnings,
            }
        )
    elif result.created:
        click.echo(f"published {result.definition} v{result.version} ({result.sha256[:12]})")
    else:
        click.echo(
            f"{result.definition}: unchanged, still v{result.version} "
            f"({result.sha256[:12]}); no new version"
        )


@click.group()
def definitions() -> None:
    """List and inspect report definitions."""


@definitions.command("list")
@click.option("--limit", type=click.IntRange(1, 1000), default=None, help="At most this many.")
@click.option("--after", default=None, help="Continue after this cursor (from --json).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def definitions_list(app: AppContext, limit: int | None, after: str | None, as_json: bool) -> None:
    """List the tenant's report definitions, by name."""
    from nbcast.views.definitions import list_definitions

    with app.db.session() as session:
        page = list_definitions(
            session, app.caller, limit=limit or 1000, after=after, now=app.clock.now()
        )
    if as_json:
        emit_json([d.to_json() for d in page.items])  # a list, as it always was
        if page.next_after:
            click.echo(f"more: --after {page.next_after}", err=True)
        return
    table(
        None,
        ["name", "version", "schedule", "next fire (UTC)", "last run", "status"],
        [
            (
                d.name,
                d.latest_version,
                d.schedule,
                when(d.next_fire_at),
                d.last_run.state if d.last_run else "",
                _status(d),
            )
            for d in page.items
        ],
        wrap=["schedule", "status"],
    )
    if page.next_after:
        click.echo(f"more: --after {page.next_after}")


def _status(info: Any) -> str:
    if info.schedule_error:
        return f"FAILING ({info.failures}x): {info.schedule_error}"
    return "paused" if info.paused else "ok"


@definitions.command("show")
@click.argument("name")
@click.option("--version", "number", type=VERSION, default=None, help="Version (default latest).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def definitions_show(app: AppContext, name: str, number: int | None, as_json: bool) -> None:
    """Show one version of a definition: parameters, schedule, outputs, subscriptions."""
    from nbcast.views.definitions import get_definition_detail

    with app.db.session() as session:
        detail = get_definition_detail(session, app.caller, name, number, now=app.clock.now())
    if as_json:
        emit_json(detail.to_json())
        return
    info, status = detail.version, detail.record
    click.echo(f"{info.definition} v{info.version}  sha256 {info.sha256}")
    click.echo(f"author {info.author}, {when(info.created_at)}: {info.message or '-'}")
    click.echo(f"scheduler: {_status(status)}, next fire {when(status.next_fire_at) or '-'}")
    schema_of = {p.name: p for p in info.schema}
    table(
        "parameters",
        ["name", "type", "runs with", "from", "default", "help"],
        [
            (
                p.name,
                schema_of[p.name].type,
                json.dumps(p.value),
                p.source,
                json.dumps(p.default) if p.overridden else "",
                schema_of[p.name].help,
            )
            for p in info.effective
        ],
        wrap=["runs with", "default"],
    )
    click.echo("nbcast metadata:")
    click.echo(json.dumps(info.block, indent=2, ensure_ascii=False))


@click.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def versions(app: AppContext, name: str, as_json: bool) -> None:
    """List every version of definition NAME."""
    from nbcast.definitions.queries import list_versions

    with app.db.session() as session:
        items = list_versions(session, app.caller, name)
    if as_json:
        emit_json(
            [
                {
                    "version": v.version,
                    "sha256": v.sha256,
                    "author": v.author,
                    "message": v.message,
                    "created_at": v.created_at.isoformat(),
                }
                for v in items
            ]
        )
        return
    table(
        f"{name}: versions",
        ["version", "sha256", "author", "created", "message"],
        [(v.version, v.sha256[:12], v.author, when(v.created_at), v.message) for v in items],
    )


@click.command()
@click.argument("name")
@click.argument("a", type=VERSION)
@click.argument("b", type=VERSION)
@click.option("--json", "as_json", is_flag=True, help="Print nbdime's structured diff.")
@click.option(
    "--color/--no-color",
    default=None,
    help="Colour, even when piped (default: when printing to a terminal).",
)
@pass_app
def diff(app: AppContext, name: str, a: int, b: int, as_json: bool, color: bool | None) -> None:
    """Show what changed in definition NAME from version A to version B: first what
    changes for recipients (parameters as they run, schedule with its next fires,
    recipients, outputs), then the code as unified hunks with context."""
    from nbcast.definitions.diff import diff_versions
    from nbcast.definitions.diff_render import render_diff
    from nbcast.definitions.queries import get_version
    from nbcast.definitions.review import review_summary

    with app.db.session() as session:
        old = get_version(session, app.caller, name, a)
        new = get_version(session, app.caller, name, b)
    summary = review_summary(old, new, app.clock.now())
    if as_json:
        emit_json(
            {
                "definition": name,
                "a": a,
                "b": b,
                "summary": summary.to_json(),
                "diff": diff_versions(old, new),
            }
        )
        return
    colored = sys.stdout.isatty() if color is None else color
    text = render_diff(old, new, color=colored)
    lines = summary.lines()
    if colored:
        lines = [f"{BOLD}{lines[0]}{RESET}", *(_warned(line) for line in lines[1:])]
    click.echo("\n".join(lines), color=colored)
    if text:
        click.echo("", color=colored)
        click.echo(text, color=colored)
    else:
        click.echo(f"{name}: the notebooks of v{a} and v{b} are identical", color=colored)


BOLD, YELLOW, RESET = "\x1b[1m", "\x1b[33m", "\x1b[0m"


def _warned(line: str) -> str:
    """A summary line, in yellow when it flags a change a reader would get wrong."""
    return f"{YELLOW}{line}{RESET}" if line.startswith("  ! ") else line


@click.command()
@click.argument("name")
@click.option("--version", "number", type=VERSION, default=None, help="Version (default latest).")
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="Where to write the notebook.",
)
@click.option("--force", is_flag=True, help="Overwrite OUT if it exists.")
@pass_app
def export(app: AppContext, name: str, number: int | None, output: Path, force: bool) -> None:
    """Write a stored version of NAME to a notebook file.

    OUT's folder must exist; an existing OUT is replaced only with --force, and never
    a file inside the nbcast home (its database, keys, artifacts).
    """
    import nbformat

    from nbcast.definitions.queries import get_version
    from nbcast.errors import ConfigError

    target = output.absolute()
    home = app.settings.home.absolute()
    if target == home or home in target.parents or home.resolve() in target.resolve().parents:
        raise ConfigError(f"-o {output}: refusing to write inside the nbcast home {home}")
    if not target.parent.is_dir():
        raise ConfigError(f"-o {output}: the folder {target.parent} does not exist")
    if target.exists() and not force:
        raise ConfigError(f"-o {output}: the file exists (add --force to replace it)")
    with app.db.session() as session:
        info = get_version(session, app.caller, name, number)
    nbformat.write(nbformat.from_dict(info.notebook), str(output))
    click.echo(f"wrote {name} v{info.version} to {output}")


COMMANDS = [publish, definitions, versions, diff, export]
"""The commands this module adds to ``nbcast``."""
