"""The ``nbcast`` command.

Output is for people (rich tables) unless ``--json`` is given, then for programs.

**No traceback reaches a user.** :func:`main` turns every
:class:`~nbcast.errors.NbcastError`, every usage error, every database error and
every operating-system error (a full disk, a read-only folder) into one line,
``error: …``, on stderr and exit status 2. Anything else is a bug: it prints one
line pointing to a log file that holds the traceback (``$NBCAST_HOME/logs/
errors.log``) and exits with status 1. Messages are one line, and echo at most a
few dozen characters of any input (:func:`nbcast.limits.clip`).

The command runs with umask ``077``: the home folder's files are private.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from nbcast.config import Settings, load_settings
from nbcast.errors import NbcastError

__all__ = ["cli", "main"]


@dataclass
class AppContext:
    """Lazily opened state shared by the commands of one invocation."""

    settings: Settings
    tenant_named: bool = False
    """Whether a tenant was named (``--tenant`` or ``NBCAST_TENANT``)."""
    _db: Any = field(default=None, repr=False)
    _clock: Any = field(default=None, repr=False)

    @property
    def clock(self) -> Any:
        """The clock (``NBCAST_CLOCK``; the real one by default)."""
        if self._clock is None:
            from nbcast.clock import clock_from_env

            self._clock = clock_from_env()
        return self._clock

    @property
    def db(self) -> Any:
        """The database, opened (and migrated) on first use."""
        if self._db is None:
            from nbcast.config import prepare_home
            from nbcast.db import Database

            prepare_home(self.settings.home)
            self._db = Database.open(self.settings.database_url)
        return self._db


pass_app = click.make_pass_decorator(AppContext)


def _console() -> Any:
    from rich.console import Console

    # Piped output is read by people in logs and CI: don't truncate it to 80 columns.
    return Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 160)


def _emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, default=str, ensure_ascii=False))


def _table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    _console().print(table)


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%SZ") if value is not None else ""


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="nbcast")
@click.option(
    "--tenant",
    envvar="NBCAST_TENANT",
    default=None,
    help="Tenant to act for (default: NBCAST_TENANT or 'default').",
)
@click.pass_context
def cli(ctx: click.Context, tenant: str | None) -> None:
    """nbcast: scheduled, versioned reports from Jupyter notebooks."""
    from nbcast.config import check_tenant_name

    settings = load_settings()
    if tenant:
        settings = Settings(
            home=settings.home,
            database_url=settings.database_url,
            tenant=check_tenant_name(tenant),
            user=settings.user,
        )
    ctx.obj = AppContext(settings, tenant_named=bool(tenant))


# -- db ----------------------------------------------------------------------------


@cli.group()
def db() -> None:
    """Database maintenance."""


@db.command("upgrade")
@pass_app
def db_upgrade(app: AppContext) -> None:
    """Apply all migrations (also done automatically on first use)."""
    from nbcast.config import prepare_home
    from nbcast.db import Database

    prepare_home(app.settings.home)
    database = Database.open(app.settings.database_url, upgrade=False)
    before = database.current_revision()
    database.upgrade()
    after = database.current_revision()
    click.echo(f"database {database.safe_url}: {before or 'empty'} -> {after}")


# -- definitions ---------------------------------------------------------------------


@cli.command()
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
    _check_publishable(prepared)
    result = do_publish(
        app.db,
        path,
        tenant=app.settings.tenant,
        author=author or app.settings.user,
        name=name,
        message=message,
        now=app.clock.now(),
    )
    if as_json:
        _emit_json(
            {
                "definition": result.definition,
                "version": result.version,
                "sha256": result.sha256,
                "created": result.created,
            }
        )
    elif result.created:
        click.echo(f"published {result.definition} v{result.version} ({result.sha256[:12]})")
    else:
        click.echo(
            f"{result.definition}: unchanged, still v{result.version} "
            f"({result.sha256[:12]}); no new version"
        )


def _check_publishable(prepared: Any) -> None:
    """Checks that depend on where nbcast runs rather than on the notebook: webhook
    URLs against the configured policy (refused), the kernel (a warning)."""
    from nbcast.delivery.webhook_policy import check_webhook_url, load_webhook_policy
    from nbcast.errors import ConfigError, MetadataError
    from nbcast.executor.kernelspec_check import missing_kernel

    webhooks = [
        (index, sub.to)
        for index, sub in enumerate(prepared.spec.subscriptions)
        if sub.channel == "webhook"
    ]
    if webhooks:
        policy = load_webhook_policy()
        for index, url in webhooks:
            try:
                check_webhook_url(url, policy, resolve=False)
            except ConfigError as exc:
                raise MetadataError(f"subscriptions[{index}].to", str(exc)) from None
    kernel = missing_kernel(prepared.notebook)
    if kernel is not None:
        click.echo(
            f"warning: kernel {kernel!r} is not installed here (jupyter kernelspec list); "
            "runs on this machine will fail until it is",
            err=True,
        )


@cli.group()
def definitions() -> None:
    """List and inspect report definitions."""


@definitions.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def definitions_list(app: AppContext, as_json: bool) -> None:
    """List the tenant's report definitions."""
    from nbcast.definitions.versions import list_definitions

    items = list_definitions(app.db, app.settings.tenant)
    if as_json:
        _emit_json(
            [
                {
                    "name": d.name,
                    "latest_version": d.latest_version,
                    "schedule": d.schedule,
                    "source_path": d.source_path,
                    "updated_at": d.updated_at.isoformat(),
                    "paused": d.paused,
                    "schedule_error": d.schedule_error,
                    "failures": d.failures,
                }
                for d in items
            ]
        )
        return
    _table(
        None,
        ["name", "version", "schedule", "updated", "status", "source"],
        [
            (d.name, d.latest_version, d.schedule, _when(d.updated_at), _status(d), d.source_path)
            for d in items
        ],
    )


def _status(info: Any) -> str:
    if info.schedule_error:
        return f"FAILING ({info.failures}x): {info.schedule_error}"
    return "paused" if info.paused else "ok"


@definitions.command("show")
@click.argument("name")
@click.option("--version", "number", type=int, default=None, help="Version (default latest).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def definitions_show(app: AppContext, name: str, number: int | None, as_json: bool) -> None:
    """Show one version of a definition: parameters, schedule, outputs, subscriptions."""
    from dataclasses import asdict

    from nbcast.definitions.versions import get_version, list_definitions

    info = get_version(app.db, app.settings.tenant, name, number)
    status = list_definitions(app.db, app.settings.tenant, name=name)[0]
    if as_json:
        _emit_json(
            {
                "definition": info.definition,
                "version": info.version,
                "sha256": info.sha256,
                "author": info.author,
                "message": info.message,
                "created_at": info.created_at.isoformat(),
                "parameters": [asdict(p) for p in info.schema],
                "nbcast": info.block,
                "paused": status.paused,
                "next_fire_at": status.next_fire_at.isoformat() if status.next_fire_at else None,
                "schedule_error": status.schedule_error,
                "failures": status.failures,
            }
        )
        return
    click.echo(f"{info.definition} v{info.version}  sha256 {info.sha256}")
    click.echo(f"author {info.author}, {_when(info.created_at)}: {info.message or '-'}")
    click.echo(f"scheduler: {_status(status)}, next fire {_when(status.next_fire_at) or '-'}")
    _table(
        "parameters",
        ["name", "type", "default", "help"],
        [(p.name, p.type, json.dumps(p.default), p.help) for p in info.schema],
    )
    click.echo("nbcast metadata:")
    click.echo(json.dumps(info.block, indent=2, ensure_ascii=False))


@cli.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def versions(app: AppContext, name: str, as_json: bool) -> None:
    """List every version of definition NAME."""
    from nbcast.definitions.versions import list_versions

    items = list_versions(app.db, app.settings.tenant, name)
    if as_json:
        _emit_json(
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
    _table(
        f"{name}: versions",
        ["version", "sha256", "author", "created", "message"],
        [(v.version, v.sha256[:12], v.author, _when(v.created_at), v.message) for v in items],
    )


@cli.command()
@click.argument("name")
@click.argument("a", type=int)
@click.argument("b", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print nbdime's structured diff.")
@click.option("--color/--no-color", default=None, help="Colour (default: if a terminal).")
@pass_app
def diff(app: AppContext, name: str, a: int, b: int, as_json: bool, color: bool | None) -> None:
    """Show what changed in definition NAME from version A to version B."""
    from nbcast.definitions.diff import diff_versions
    from nbcast.definitions.diff_render import render_diff
    from nbcast.definitions.versions import get_version

    old = get_version(app.db, app.settings.tenant, name, a)
    new = get_version(app.db, app.settings.tenant, name, b)
    if as_json:
        _emit_json({"definition": name, "a": a, "b": b, "diff": diff_versions(old, new)})
        return
    text = render_diff(old, new, color=sys.stdout.isatty() if color is None else color)
    click.echo(text if text else f"{name}: v{a} and v{b} are identical")


@cli.command()
@click.argument("name")
@click.option("--version", "number", type=int, default=None, help="Version (default latest).")
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="Where to write the notebook.",
)
@pass_app
def export(app: AppContext, name: str, number: int | None, output: Path) -> None:
    """Write a stored version of NAME to a notebook file."""
    import nbformat

    from nbcast.definitions.versions import get_version

    info = get_version(app.db, app.settings.tenant, name, number)
    output.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.from_dict(info.notebook), str(output))
    click.echo(f"wrote {name} v{info.version} to {output}")


def _register_commands() -> None:
    from nbcast import cli_delivery, cli_executor, cli_scheduler  # noqa: F401  (add their commands)


_register_commands()


def _one_line(text: str, limit: int = 1000) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def error_line(message: str) -> None:
    """Print ``error: message`` as one line on stderr."""
    click.echo(f"error: {_one_line(message)}", err=True)


def _log_internal_error(exc: BaseException) -> str:
    """Append the traceback to the error log; return where it went."""
    import tempfile
    import traceback
    from datetime import UTC, datetime
    from pathlib import Path

    text = "".join(traceback.format_exception(exc))
    stamp = datetime.now(UTC).isoformat()
    candidates = []
    with contextlib.suppress(Exception):  # the settings themselves may be what is broken
        candidates.append(load_settings().home / "logs")
    candidates.append(Path(tempfile.gettempdir()) / f"nbcast-{os.getuid()}")
    for folder in candidates:
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            path = folder / "errors.log"
            with path.open("a", encoding="utf-8") as handle:
                handle.write(f"--- {stamp} nbcast {' '.join(sys.argv[1:])[:500]}\n{text}\n")
            return str(path)
        except OSError:
            continue
    return "(no writable log folder)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit status (module docstring: 2 for bad input, 1 for a
    bug, with one line on stderr either way)."""
    import sqlalchemy as sa

    previous = os.umask(0o077)
    try:
        result = cli.main(
            args=list(argv) if argv is not None else None, prog_name="nbcast", standalone_mode=False
        )
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else "")
        return 0
    except click.ClickException as exc:
        ctx = getattr(exc, "ctx", None)
        hint = f" (try '{ctx.command_path} --help')" if ctx is not None else ""
        error_line(exc.format_message() + hint)
        return 2
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("aborted", err=True)
        return 130
    except NbcastError as exc:
        error_line(str(exc))
        return 2
    except sa.exc.DBAPIError as exc:
        from nbcast.db import _reason

        error_line(f"database: {_reason(exc)}")
        return 2
    except OSError as exc:
        where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
        error_line(f"{exc.strerror or type(exc).__name__}{where}")
        return 2
    except Exception as exc:  # a bug: one line for the user, the traceback in the log
        path = _log_internal_error(exc)
        error_line(
            f"internal error ({type(exc).__name__}: {_one_line(str(exc), 200)}); "
            f"the traceback is in {path}"
        )
        return 1
    finally:
        os.umask(previous)
    return int(result) if isinstance(result, int) else 0
