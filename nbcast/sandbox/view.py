"""What a sandbox shows of the machine's files, and what it hides even there.

A kernel sees, all read-only unless said otherwise:

- the operating system's programs and libraries (``/usr`` and the ``/bin``, ``/lib``…
  links or folders beside it) and a short list of ``/etc`` files programs need to
  resolve names, verify TLS certificates, load libraries and tell the time
  (:data:`ETC_FILES`) — never all of ``/etc``, where services keep their secrets;
- the Python environment the kernel runs in: the interpreter's prefixes, its standard
  library and site-packages, and the folders site-packages' ``.pth`` files add (a
  project installed in development mode) — not the worker's working directory or
  script folder, nor any folder that holds the user's home;
- a ``/etc/passwd`` and ``/etc/group`` of its own naming the tenant's user;
- the tenant's lake scope (:attr:`~nbcast.sandbox.policy.SandboxSpec.readonly`);
- its run folder, read-write, at the same path as outside (the kernel's sockets live
  there, and the worker connects to them by that path);
- a private ``/tmp`` and ``/dev/shm`` (tmpfs, bounded), a ``/dev`` with only the
  harmless devices and a ``/proc`` of its own PID namespace.

**Hidden even under a shown folder** (:func:`hidden_paths`): when a folder on
``sys.path`` holds nbcast's home (a development checkout used as ``NBCAST_HOME``'s
parent, say), the home, the database file, the signing keys, the secret files named by
``NBCAST_*_FILE`` variables, Jupyter's runtime folder (the server's ``jpserver-*.json``
and its cookie secret), the worker's run folders and the artifact store are covered
with an empty filesystem before the run folder is shown.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["ETC_FILES", "SYSTEM_LINKS", "Bind", "hidden_paths", "python_paths", "system_binds"]

ETC_FILES: tuple[str, ...] = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/crypto-policies",
    "/etc/fonts",
    "/etc/mime.types",
    "/etc/alternatives",
    "/etc/os-release",
    "/etc/lsb-release",
    "/etc/debian_version",
)
"""``/etc`` entries a kernel may need (each shown only if it exists)."""

SYSTEM_LINKS: tuple[str, ...] = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""Top-level entries that are links into ``/usr`` on merged-``/usr`` systems (shown as
the same links) or folders of their own (shown read-only)."""


@dataclass(frozen=True)
class Bind:
    """A host path shown in the sandbox at the same place."""

    path: str
    writable: bool = False


def system_binds() -> tuple[list[Bind], list[tuple[str, str]]]:
    """The operating system's part: folders to show, and ``(link, target)`` links."""
    binds = [Bind("/usr")]
    links: list[tuple[str, str]] = []
    for entry in SYSTEM_LINKS:
        if os.path.islink(entry):
            links.append((entry, os.readlink(entry)))
        elif os.path.isdir(entry):
            binds.append(Bind(entry))
    binds.extend(Bind(path) for path in ETC_FILES if os.path.exists(path))
    return binds, links


def _covered(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _pth_folders(site_packages: Sequence[str]) -> list[str]:
    """Folders the ``.pth`` files of ``site_packages`` add to ``sys.path`` (a project
    installed in development mode, say); their ``import`` lines are not run."""
    found: list[str] = []
    for folder in site_packages:
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(".pth"))
        except OSError:
            continue
        for name in names:
            try:
                with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
                    lines = f.read(65536).splitlines()
            except OSError:
                continue
            for line in lines:
                line = line.strip()
                if line and not line.startswith(("#", "import ", "import\t")):
                    path = line if os.path.isabs(line) else os.path.join(folder, line)
                    found.append(path)
    return found


def python_paths(extra: Sequence[str] = ()) -> list[str]:
    """The folders of this Python environment a kernel needs, outermost only.

    The interpreter's prefixes and its own folder, the standard library and
    site-packages folders, and the folders site-packages' ``.pth`` files add (a
    project installed in development mode), plus ``extra`` — real paths, links
    resolved. Not every folder on ``sys.path``: that also holds the working directory
    and the folder of whatever script started the worker (a Ray worker's driver's
    too), which are nobody's to show. A folder that is, or holds, the user's home is
    never shown.
    """
    paths = sysconfig.get_paths()
    site_packages = [paths["purelib"], paths["platlib"], *site.getsitepackages()]
    candidates = [
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        paths["stdlib"],
        paths["platstdlib"],
        *site_packages,
        *_pth_folders(site_packages),
        *extra,
    ]
    home = os.path.realpath(os.path.expanduser("~"))
    found: set[str] = set()
    for candidate in candidates:
        if not candidate:
            continue
        for path in {os.path.abspath(candidate), os.path.realpath(candidate)}:
            holds_home = home == path or home.startswith(path.rstrip("/") + "/")
            if os.path.isdir(path) and path != "/" and not holds_home:
                found.add(path)
    outermost: list[str] = []
    for path in sorted(found, key=len):
        if not _covered(path, outermost):
            outermost.append(path)
    return sorted(outermost)


def hidden_paths(
    *,
    home: str | None,
    extra: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """What must stay hidden even under a folder the sandbox shows (module docstring).

    ``home`` is nbcast's home; ``extra`` the worker's run folders, the artifact store,
    the database file and whatever else the caller keeps private.
    """
    env = os.environ if environ is None else environ
    paths: list[str] = []
    if home:
        paths.append(home)
    paths.extend(extra)
    for name, value in env.items():
        if name.startswith("NBCAST_") and name.endswith("_FILE") and value:
            paths.append(value)
    try:
        from jupyter_core.paths import jupyter_runtime_dir

        paths.append(jupyter_runtime_dir())
    except Exception:  # jupyter_core missing or unreadable config: nothing to hide there
        pass
    hidden: set[str] = set()
    for path in paths:
        if path and "\x00" not in path and "://" not in path:
            for form in (os.path.abspath(path), os.path.realpath(path)):
                if form != "/":
                    hidden.add(form)
    return sorted(hidden)
