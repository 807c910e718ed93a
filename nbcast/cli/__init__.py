"""The ``nbcast`` command: a thin face over the command and query layer.

One module per area (:mod:`~nbcast.cli.definitions`, :mod:`~nbcast.cli.schedule`,
:mod:`~nbcast.cli.scheduler`, :mod:`~nbcast.cli.runs`, :mod:`~nbcast.cli.tenants`,
:mod:`~nbcast.cli.worker`, :mod:`~nbcast.cli.delivery`, :mod:`~nbcast.cli.db`,
:mod:`~nbcast.cli.server`, :mod:`~nbcast.cli.users`, :mod:`~nbcast.cli.audit`,
:mod:`~nbcast.cli.warehouse`), each
listing its ``COMMANDS``; :mod:`~nbcast.cli.app` holds the typed application context
and :mod:`~nbcast.cli.output` the shared output helpers. No command holds SQL of its
own: each calls the planes' query and command functions.

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
import dataclasses
import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from nbcast.cli import (
    audit,
    cost,
    db,
    definitions,
    delivery,
    oversight,
    retention,
    runs,
    schedule,
    scheduler,
    server,
    sla,
    tenants,
    users,
    warehouse,
    worker,
)
from nbcast.cli.app import AppContext
from nbcast.config import load_settings
from nbcast.errors import NbcastError

__all__ = ["cli", "error_line", "main"]


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
    if tenant:  # every other setting (NBCAST_ARTIFACTS too) as the environment says
        settings = dataclasses.replace(settings, tenant=check_tenant_name(tenant))
    ctx.obj = AppContext(settings)


for _area in (
    db,
    definitions,
    schedule,
    scheduler,
    runs,
    worker,
    tenants,
    users,
    audit,
    retention,
    cost,
    sla,
    delivery,
    oversight,
    server,
    warehouse,
):
    for _command in _area.COMMANDS:
        cli.add_command(_command)


def _one_line(text: str, limit: int = 1000) -> str:
    """``text`` on one line, control characters escaped (no terminal escape sequence or
    NUL from an input reaches the screen), at most ``limit`` characters."""
    line = " ".join(str(text).split())
    line = "".join(
        ch if ch.isprintable() and not 0xD800 <= ord(ch) <= 0xDFFF else ascii(ch)[1:-1]
        for ch in line
    )
    return line if len(line) <= limit else line[: limit - 1] + "…"


def error_line(message: str) -> None:
    """Print ``error: message`` as one line on stderr."""
    click.echo(f"error: {_one_line(message)}", err=True)


def _log_internal_error(exc: BaseException) -> str:
    """Append the traceback to the error log; return where it went.

    The log is ``$NBCAST_HOME/logs/errors.log``, else ``<tmp>/nbcast-<uid>/errors.log``
    — a folder used only when it is this user's own and private, a file opened
    without following a symbolic link — so another local user cannot make nbcast
    write a traceback (and the command line) somewhere of their choosing. Logging never
    raises: a failure to log is reported as such.
    """
    try:
        import tempfile
        import traceback
        from datetime import UTC, datetime
        from pathlib import Path

        text = "".join(traceback.format_exception(exc))
        argv = " ".join(sys.argv[1:])[:500]
        entry = f"--- {datetime.now(UTC).isoformat()} nbcast {argv}\n{text}\n"
        candidates = []
        with contextlib.suppress(Exception):  # the settings themselves may be what is broken
            candidates.append(load_settings().home / "logs")
        candidates.append(Path(tempfile.gettempdir()) / f"nbcast-{os.getuid()}")
        for folder in candidates:
            with contextlib.suppress(OSError):
                return _append_private(folder, entry)
    except Exception:  # the log is a courtesy; the error line must still be printed
        pass
    return "(no writable log folder)"


def _append_private(folder: Any, entry: str) -> str:
    import stat

    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(folder)
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != os.getuid()
        or stat.S_IMODE(info.st_mode) & 0o077
    ):
        raise OSError(f"{folder} is not a private folder of this user")
    path = folder / "errors.log"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8", errors="backslashreplace") as handle:
        handle.write(entry)
    return str(path)


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
        error_line(_one_line(exc.format_message(), 300) + hint)
        return 2
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("aborted", err=True)
        return 130
    except NbcastError as exc:
        error_line(str(exc))
        return 2
    except sa.exc.DBAPIError as exc:
        from nbcast.db import error_reason

        error_line(f"database: {error_reason(exc)}")
        return 2
    except OSError as exc:
        where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
        error_line(f"{exc.strerror or type(exc).__name__}{where}")
        return 2
    except UnicodeEncodeError:
        # Bytes on the command line that are not UTF-8 arrive as lone surrogates; where
        # no check named the field first, the database refuses to encode them.
        error_line("the command line holds text that is not valid UTF-8")
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
