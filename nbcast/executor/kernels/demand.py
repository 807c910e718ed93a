"""Which kernels a pool keeps ready: how many of each kind (:class:`Demand`).

A sandboxed kernel belongs to one tenant from before its run is known — its sandbox,
uid and run folder are made when it starts — so a pool that serves several tenants
keeps kernels *per kind* (its :class:`~nbcast.sandbox.policy.SandboxSpec`, or ``None``
for unsandboxed kernels). The pool's ``size`` is shared among kinds:

- a pool made for one kind (the unsandboxed default) wants ``size`` of it from the
  start, provisionally: until a run has used that kind, its units are free for the
  first kind that is used (a sandboxed worker's pool made with the default wastes no
  kernels on a kind it never asks for);
- the first run of a kind nobody wants yet takes every free unit, or, when all are
  wanted, one unit from the kind used least recently (a tenant that stopped running
  gives its kernels up to one that started);
- the total never exceeds ``size``.

So a worker serving one tenant keeps ``size`` kernels of it ready after its first run,
and one serving many keeps the most recent tenants' kernels ready. The pool starts
and stops kernels to follow the wants (:meth:`Demand.wanted`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

__all__ = ["Demand"]

K = TypeVar("K", bound=Hashable)


class Demand(Generic[K]):
    """How many ready kernels of each kind a pool of ``size`` wants (module docstring)."""

    def __init__(self, size: int, kinds: Iterable[K] = ()) -> None:
        self.size = size
        #: kind -> units, least recently used first
        self._wants: OrderedDict[K, int] = OrderedDict()
        #: kinds a run has used (the others' units are provisional)
        self._used: set[K] = set()
        initial = list(kinds)
        for index, kind in enumerate(initial):
            share = size // len(initial) + (1 if index < size % len(initial) else 0)
            if share:
                self._wants[kind] = share

    def used(self, kind: K) -> None:
        """A run took a kernel of ``kind``: make it the most recently used, wanted."""
        if self.size <= 0:
            return
        self._used.add(kind)
        if kind in self._wants:
            self._wants.move_to_end(kind)
            return
        for provisional in [k for k in self._wants if k not in self._used]:
            del self._wants[provisional]
        free = self.size - sum(self._wants.values())
        if free > 0:
            self._wants[kind] = free
            return
        other = next(iter(self._wants))  # the least recently used gives one unit up
        self._wants[other] -= 1
        if self._wants[other] == 0:
            del self._wants[other]
        self._wants[kind] = 1

    def wanted(self, kind: K) -> int:
        """Ready kernels of ``kind`` the pool should keep."""
        return self._wants.get(kind, 0)

    def kinds(self) -> list[K]:
        """Kinds with wants, least recently used first."""
        return list(self._wants)

    def __repr__(self) -> str:
        return f"Demand(size={self.size}, wants={dict(self._wants)!r})"
