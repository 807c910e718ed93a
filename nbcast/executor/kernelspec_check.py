"""Is the kernel a notebook asks for installed here? A cheap check, no kernel started.

papermill starts the kernel named by the notebook's ``metadata.kernelspec.name``; when
no kernelspec by that name is installed where the run executes, the run cannot start
(``jupyter_client.kernelspec.NoSuchKernel``) however often it is retried. ``nbcast
publish`` warns about it with :func:`missing_kernel`, and every attempt checks it
before a kernel is started (:mod:`nbcast.executor.preflight`).

A notebook that names no kernel runs on :data:`DEFAULT_KERNEL` (``python3``), in
Python: the runner passes both to papermill explicitly (papermill alone refuses such a
notebook, "No kernel name found").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_KERNEL", "kernel_language", "kernel_name", "missing_kernel"]

DEFAULT_KERNEL = "python3"
"""The kernel a notebook without ``metadata.kernelspec.name`` runs on."""


def kernel_name(notebook: Mapping[str, Any]) -> str:
    """The kernelspec name the notebook runs on: ``metadata.kernelspec.name``, else
    :data:`DEFAULT_KERNEL`."""
    metadata = notebook.get("metadata")
    spec = metadata.get("kernelspec") if isinstance(metadata, Mapping) else None
    name = spec.get("name") if isinstance(spec, Mapping) else None
    return name if isinstance(name, str) and name.strip() else DEFAULT_KERNEL


def kernel_language(notebook: Mapping[str, Any]) -> str | None:
    """The notebook's language as papermill looks for it (``kernelspec.language``, then
    ``language_info.name``); ``python`` when it names neither and runs on
    :data:`DEFAULT_KERNEL`; else None."""
    metadata = notebook.get("metadata")
    if not isinstance(metadata, Mapping):
        metadata = {}
    for key, field in (("kernelspec", "language"), ("language_info", "name")):
        block = metadata.get(key)
        value = block.get(field) if isinstance(block, Mapping) else None
        if isinstance(value, str) and value.strip():
            return value
    return "python" if kernel_name(notebook).lower() == DEFAULT_KERNEL else None


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
