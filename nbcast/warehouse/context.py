"""The run context of :mod:`nbcast.warehouse`: which connections a run may use, its caps.

Notebooks import these names from :mod:`nbcast.warehouse`, which re-exports them::

    from nbcast import warehouse
    warehouse.configure({"connections": {"default": {"kind": "parquet", "path": "lake"}}})
    warehouse.current_context().limits.max_rows   # 1000000

Design decisions
----------------
* **Where it comes from.** The runner writes a JSON file and points
  ``$NBCAST_RUN_CONTEXT`` at it, or calls :func:`configure`; ``configure`` wins. Without
  either, the documented default applies: one connection ``default`` = the Parquet
  folder ``$NBCAST_LAKE`` (empty counts as unset), else ``./lake`` under the current
  folder; limits 60 s, 1,000,000 rows, 256 MiB; no usage file.
* **Strict.** A malformed context is a :class:`~nbcast.errors.ConfigError`, never a
  silent fallback. Relative paths in a context file are relative to that file's folder.
  Unknown keys inside ``limits`` or a connection are refused (a typo must not leave a
  cap at its default); unknown top-level keys are ignored, for the runner's future use.
* **Cached.** A context file is re-read when its mtime or size changes. The configured
  context and the cached file's live here under one lock; :func:`forget` clears both
  (``warehouse.reset()`` calls it).
* **Row filter.** A recipient-scoped run's context carries ``row_filter``
  (``{"region": "EMEA"}``: attribute names like SQL identifiers, values strings, whole
  numbers or booleans); :mod:`nbcast.warehouse.connections` applies it to every query
  (:mod:`nbcast.warehouse.rls` for PostgreSQL). Absent or ``null``: the run is not
  scoped. A connection the worker could not scope to the filter arrives as
  ``{"kind": …, "withheld": "why"}`` and every query on it says why. An ``admin_url``
  in a context is refused: it must never reach a kernel (the worker strips it,
  :func:`nbcast.warehouse.rls.scoped_connections`).
* **Import cost.** Only the standard library: this module loads in every kernel.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbcast.errors import ConfigError

__all__ = [
    "DEFAULT_CONNECTION",
    "DEFAULT_LIMITS",
    "ENV_LAKE",
    "ENV_RUN_CONTEXT",
    "KINDS",
    "ConnectionSpec",
    "Limits",
    "WarehouseContext",
    "configure",
    "current_context",
    "forget",
    "host_paths",
    "load_context",
    "parse_row_filter",
]

ENV_RUN_CONTEXT = "NBCAST_RUN_CONTEXT"
ENV_LAKE = "NBCAST_LAKE"
DEFAULT_CONNECTION = "default"
KINDS = ("parquet", "duckdb", "sqlalchemy")
MAX_FILTER_KEYS = 8
"""Attributes one row filter may name (as a subscription's ``row_filter``)."""
MAX_FILTER_VALUE = 256
"""Characters of one row-filter string value."""
_ATTRIBUTE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Limits:
    """The caps every query of a run is held to."""

    timeout_s: float = 60.0
    max_rows: int = 1_000_000
    max_bytes: int = 256 * 1024 * 1024
    budget_bytes_left: int | None = None
    """What the tenant's daily warehouse budget had left when the run was claimed
    (None: no budget); the run's queries together may not read more."""


DEFAULT_LIMITS = Limits()


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConnectionSpec:
    """Where a named connection points: ``kind`` with its ``path`` or ``url``."""

    kind: str
    path: Path | None = None
    url: str | None = dataclasses.field(default=None, repr=False)
    withheld: str | None = None
    """Why this run may not use the connection (it could not be scoped to the run's
    row filter); None for a usable connection."""

    def __str__(self) -> str:
        if self.url is not None:  # never print a password
            return self.kind + ":" + re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", self.url)
        return f"{self.kind}:{self.path}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class WarehouseContext:
    """What a run may use: its connections and limits, and where its usage goes."""

    run_id: int | str | None = None
    tenant: str = "default"
    connections: Mapping[str, ConnectionSpec]
    limits: Limits = DEFAULT_LIMITS
    usage_path: Path | None = None
    source: str = "default"
    row_filter: Mapping[str, str | int | bool] | None = None
    """The recipient scope applied to every query (module docstring); None: unscoped."""


_lock = threading.Lock()
_configured: WarehouseContext | None = None
_env_cache: tuple[tuple[str, int, int], WarehouseContext] | None = None


def _positive(value: Any, name: str, integer: bool) -> Any:
    ok_types = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, ok_types) or not value > 0:
        kind = "a positive integer" if integer else "a positive number"
        raise ConfigError(f"limits.{name} must be {kind}, not {value!r}")
    return value


def _parse_limits(data: Any) -> Limits:
    if data is None:
        return DEFAULT_LIMITS
    if not isinstance(data, Mapping):
        raise ConfigError(f"limits must be an object, not {data!r}")
    unknown = set(data) - {"timeout_s", "max_rows", "max_bytes", "budget_bytes_left"}
    if unknown:
        raise ConfigError(f"limits: unknown keys {sorted(unknown)}")
    default = DEFAULT_LIMITS
    return Limits(
        timeout_s=float(_positive(data.get("timeout_s", default.timeout_s), "timeout_s", False)),
        max_rows=_positive(data.get("max_rows", default.max_rows), "max_rows", True),
        max_bytes=_positive(data.get("max_bytes", default.max_bytes), "max_bytes", True),
        budget_bytes_left=_budget_left(data.get("budget_bytes_left")),
    )


def _budget_left(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise ConfigError(f"limits.budget_bytes_left must be a whole number >= 0, not {value!r}")
    return value


def _parse_connection(name: str, data: Any, base: Path) -> ConnectionSpec:
    if not isinstance(data, Mapping):
        raise ConfigError(f"connections.{name} must be an object, not {data!r}")
    kind = data.get("kind")
    if kind not in KINDS:
        raise ConfigError(f"connections.{name}.kind must be one of {', '.join(KINDS)}")
    if "admin_url" in data:
        raise ConfigError(
            f"connections.{name}.admin_url must never reach a kernel (the worker strips it "
            "with nbcast.warehouse.rls.scoped_connections)"
        )
    if "withheld" in data:
        reason = data["withheld"]
        if set(data) - {"kind", "withheld"} or not isinstance(reason, str) or not reason:
            raise ConfigError(f"connections.{name}: a withheld connection has kind and a reason")
        return ConnectionSpec(kind=kind, withheld=reason[:500])
    key = "url" if kind == "sqlalchemy" else "path"
    unknown = set(data) - {"kind", key}
    if unknown:
        raise ConfigError(f"connections.{name}: unknown keys {sorted(unknown)} for {kind}")
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"connections.{name}.{key} must be a non-empty string")
    if kind == "sqlalchemy":
        return ConnectionSpec(kind=kind, url=value)
    return ConnectionSpec(kind=kind, path=(base / Path(value).expanduser()).resolve())


def parse_row_filter(data: Any) -> dict[str, str | int | bool] | None:
    """A context's ``row_filter`` checked (module docstring): None or ``{}`` for an
    unscoped run, else the attributes (:class:`~nbcast.errors.ConfigError` otherwise)."""
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise ConfigError(f"row_filter must be an object or null, not {type(data).__name__}")
    if len(data) > MAX_FILTER_KEYS:
        raise ConfigError(f"row_filter names more than {MAX_FILTER_KEYS} attributes")
    result: dict[str, str | int | bool] = {}
    for key, value in data.items():
        if not isinstance(key, str) or not _ATTRIBUTE.fullmatch(key):
            raise ConfigError(
                "row_filter: an attribute is named like a column (letters, _, digits)"
            )
        whole = isinstance(value, int) and abs(value) < 2**63  # booleans included
        text = isinstance(value, str) and 0 < len(value) <= MAX_FILTER_VALUE and value.isprintable()
        if not (whole or text):
            raise ConfigError(
                f"row_filter.{key} must be a string of 1-{MAX_FILTER_VALUE} printable "
                "characters, a whole number or a boolean"
            )
        result[key] = value
    return result or None


def _parse_context(data: Any, base: Path, source: str) -> WarehouseContext:
    if not isinstance(data, Mapping):
        raise ConfigError(f"run context ({source}) must be a JSON object")
    try:
        connections = data.get("connections")
        if not isinstance(connections, Mapping):
            raise ConfigError("connections must be an object of name -> connection")
        run_id = data.get("run_id")
        if isinstance(run_id, bool) or not isinstance(run_id, int | str | None):
            raise ConfigError(f"run_id must be an integer, a string or null, not {run_id!r}")
        tenant = data.get("tenant", "default")
        if not isinstance(tenant, str) or not tenant:
            raise ConfigError(f"tenant must be a non-empty string, not {tenant!r}")
        usage_path = data.get("usage_path")
        if usage_path is not None and (not isinstance(usage_path, str) or not usage_path):
            raise ConfigError(f"usage_path must be a non-empty string or null, not {usage_path!r}")
        return WarehouseContext(
            run_id=run_id,
            tenant=tenant,
            connections={
                str(name): _parse_connection(str(name), spec, base)
                for name, spec in connections.items()
            },
            limits=_parse_limits(data.get("limits")),
            usage_path=None if usage_path is None else (base / usage_path).resolve(),
            source=source,
            row_filter=parse_row_filter(data.get("row_filter")),
        )
    except ConfigError as exc:
        raise ConfigError(f"run context ({source}): {exc}") from None


def load_context(source: str | os.PathLike[str] | Mapping[str, Any]) -> WarehouseContext:
    """Parse and validate a run context from a JSON file or a mapping (``ConfigError``)."""
    if isinstance(source, Mapping):
        return _parse_context(source, Path.cwd(), "configure()")
    path = Path(source).expanduser().resolve()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read run context {path}: {exc}") from exc
    return _parse_context(data, path.parent, str(path))


def configure(source: str | os.PathLike[str] | Mapping[str, Any] | None) -> WarehouseContext:
    """Set this process's run context (it wins over ``$NBCAST_RUN_CONTEXT``).

    ``None`` forgets it, so the environment or the default applies again. Returns the
    context now in force.
    """
    global _configured
    context = None if source is None else load_context(source)
    with _lock:
        _configured = context
    return current_context()


def current_context() -> WarehouseContext:
    """The context in force: :func:`configure`'s, else ``$NBCAST_RUN_CONTEXT``'s, else default."""
    global _env_cache
    with _lock:
        if _configured is not None:
            return _configured
        env_path = os.environ.get(ENV_RUN_CONTEXT)
        if env_path:
            try:
                st = os.stat(env_path)
            except OSError as exc:
                raise ConfigError(f"${ENV_RUN_CONTEXT}={env_path} cannot be read: {exc}") from exc
            key = (env_path, st.st_mtime_ns, st.st_size)
            if _env_cache is None or _env_cache[0] != key:
                _env_cache = (key, load_context(env_path))
            return _env_cache[1]
    lake = Path(os.environ.get(ENV_LAKE) or "lake").expanduser()
    spec = ConnectionSpec(kind="parquet", path=(Path.cwd() / lake).resolve())
    return WarehouseContext(connections={DEFAULT_CONNECTION: spec}, source="default")


def forget() -> None:
    """Forget :func:`configure`'s context and the cached ``$NBCAST_RUN_CONTEXT`` file."""
    global _configured, _env_cache
    with _lock:
        _configured = None
        _env_cache = None


def host_paths(connections: Mapping[str, Any]) -> list[str]:
    """The files and folders of this machine that ``connections`` (a run context's
    ``connections``: name -> ``{"kind", "path"|"url"}``) read: what a sandboxed kernel
    must see, read-only, to use them. A Parquet folder, a DuckDB file, a SQLite file,
    and the folder of a unix socket a SQLAlchemy URL names (``host=/run/postgresql``
    or ``postgresql://user@%2Frun%2Fpostgresql/db``); a URL to a host over the network
    needs no path. Anything that cannot be read as such is skipped (its run fails on
    its own, with the warehouse's error)."""
    from urllib.parse import parse_qs, unquote, urlsplit

    found: list[str] = []
    for spec in connections.values():
        if not isinstance(spec, Mapping):
            continue
        path, url = spec.get("path"), spec.get("url")
        if isinstance(path, str) and path:
            found.append(os.path.abspath(os.path.expanduser(path)))
        if not isinstance(url, str):
            continue
        if url.startswith("sqlite:///") and len(url) > len("sqlite:///"):
            found.append(os.path.abspath(url[len("sqlite:///") :].split("?", 1)[0]))
            continue
        try:
            parts = urlsplit(url)
        except ValueError:
            continue
        hosts = parse_qs(parts.query).get("host", [])
        netloc_host = unquote(parts.netloc.rsplit("@", 1)[-1].split(":", 1)[0])
        for host in [*hosts, netloc_host]:
            if host.startswith("/"):
                found.append(os.path.abspath(host))
    return sorted(set(found))
