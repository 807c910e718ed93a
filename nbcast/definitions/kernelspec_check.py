"""Is the kernel a notebook asks for installed here? A cheap check, no kernel started.

papermill starts the kernel named by the notebook's ``metadata.kernelspec.name``; when
no kernelspec by that name is installed where the run executes, the run cannot start
(``jupyter_client.kernelspec.NoSuchKernel``) however often it is retried. ``nbcast
publish`` warns about it with :func:`missing_kernel`, and every attempt checks it
before a kernel is started (:mod:`nbcast.executor.preflight`).

A notebook that names no kernel runs on :data:`DEFAULT_KERNEL` (``python3``), in
Python: the runner passes both to papermill explicitly (papermill alone refuses such a
notebook, "No kernel name found").

**The language is the kernel's, never the notebook's claim.** papermill writes the
``-p`` values into the injected-parameters cell with the translator of a language,
which it takes from the notebook's ``kernelspec.language`` unless told otherwise. A
notebook that runs on ``python3`` but says ``"language": "bash"`` had its parameters
quoted for bash and run as Python: ``-p 's=\'"+__import__("os").system(...)#'`` ran
a shell command. So the runner passes papermill the language of the kernelspec that
is installed (:func:`installed_language`, jupyter_client's ``KernelSpecManager``),
and an attempt whose notebook declares another language
(:func:`declared_language`: ``kernelspec.language``, else ``language_info.name``) is
refused, permanently (:mod:`nbcast.executor.preflight`, ``language_mismatch``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "ALIASES",
    "DEFAULT_KERNEL",
    "declared_language",
    "installed_language",
    "kernel_language",
    "kernel_name",
    "missing_kernel",
]

DEFAULT_KERNEL = "python3"
"""The kernel a notebook without ``metadata.kernelspec.name`` runs on."""


ALIASES = {"python": DEFAULT_KERNEL}
"""Kernel names jupyter_client's kernel manager itself resolves to another
(``KernelManager`` turns ``python`` into ``python3``): such a notebook runs."""


def kernel_name(notebook: Mapping[str, Any]) -> str:
    """The kernelspec name the notebook runs on: ``metadata.kernelspec.name`` (an alias
    resolved as jupyter_client resolves it, :data:`ALIASES`), else
    :data:`DEFAULT_KERNEL`."""
    metadata = notebook.get("metadata")
    spec = metadata.get("kernelspec") if isinstance(metadata, Mapping) else None
    name = spec.get("name") if isinstance(spec, Mapping) else None
    if not isinstance(name, str) or not name.strip():
        return DEFAULT_KERNEL
    return ALIASES.get(name, name)


def declared_language(notebook: Mapping[str, Any]) -> str | None:
    """The language the notebook says it is in, as papermill looks for it
    (``kernelspec.language``, then ``language_info.name``), or None."""
    metadata = notebook.get("metadata")
    if not isinstance(metadata, Mapping):
        metadata = {}
    for key, field in (("kernelspec", "language"), ("language_info", "name")):
        block = metadata.get(key)
        value = block.get(field) if isinstance(block, Mapping) else None
        if isinstance(value, str) and value.strip():
            return value
    return None


def kernel_language(notebook: Mapping[str, Any]) -> str | None:
    """The notebook's declared language (:func:`declared_language`); ``python`` when
    it names none and runs on :data:`DEFAULT_KERNEL`; else None. What the notebook
    says, not what its kernel runs: see :func:`installed_language`."""
    declared = declared_language(notebook)
    if declared is not None:
        return declared
    return "python" if kernel_name(notebook).lower() == DEFAULT_KERNEL else None


def installed_language(name: str) -> str | None:
    """The language of the kernelspec ``name`` installed here (its ``kernel.json``),
    or None when there is no such kernelspec or it names no language."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec(name)
    except (NoSuchKernel, ValueError):
        return None
    language = spec.language
    return language if isinstance(language, str) and language.strip() else None


def missing_kernel(notebook: Mapping[str, Any]) -> str | None:
    """The notebook's kernelspec name when no such kernelspec is installed here, else None.

    Looks the name up the way papermill's kernel manager will (jupyter_client's
    ``KernelSpecManager``, including its check that the kernelspec's provisioner is
    available); it reads kernelspec files only and starts nothing. A kernelspec whose
    ``kernel.json`` cannot be parsed counts as missing: no kernel starts from it either.
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    name = kernel_name(notebook)
    try:
        KernelSpecManager().get_kernel_spec(name)
    except (NoSuchKernel, ValueError):
        return name
    return None
