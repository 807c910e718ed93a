"""The alignment helpers of the bounded notebook diff (:mod:`nbcast.definitions.diff`):
anchors that two sequences share exactly, in a common order, and common prefixes and
suffixes of long strings compared in C-speed chunks."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Hashable, Sequence

__all__ = [
    "PREFIX_CHUNK",
    "common_prefix",
    "common_suffix",
    "equal_run",
    "longest_increasing",
    "unique_anchors",
]

PREFIX_CHUNK = 4_096
"""Characters compared per slice when looking for a common prefix."""

Rect = tuple[int, int, int, int]


def longest_increasing(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest subsequence of ``pairs`` (sorted by first) whose seconds increase."""
    tails: list[int] = []
    tail_seconds: list[int] = []
    back = [-1] * len(pairs)
    for n, (_, j) in enumerate(pairs):
        k = bisect_left(tail_seconds, j)
        if k:
            back[n] = tails[k - 1]
        if k == len(tails):
            tails.append(n)
            tail_seconds.append(j)
        else:
            tails[k] = n
            tail_seconds[k] = j
    out: list[tuple[int, int]] = []
    n = tails[-1] if tails else -1
    while n >= 0:
        out.append(pairs[n])
        n = back[n]
    return out[::-1]


def unique_anchors(
    ka: Sequence[Hashable | None], kb: Sequence[Hashable | None], rect: Rect
) -> list[tuple[int, int]]:
    """Pairs (i, j) whose key occurs once on each side of ``rect``, in a common order."""
    i0, j0, i1, j1 = rect
    count_a, count_b = Counter(ka[i0:i1]), Counter(kb[j0:j1])
    where_b = {
        k: j
        for j, k in enumerate(kb[j0:j1], j0)
        if k is not None and count_b[k] == 1 and count_a[k] == 1
    }
    pairs = [(i, where_b[k]) for i, k in enumerate(ka[i0:i1], i0) if k in where_b]
    return longest_increasing(pairs)


def equal_run(
    ka: Sequence[Hashable | None], kb: Sequence[Hashable | None], i: int, j: int, n: int, step: int
) -> int:
    """How many of the ``n`` keys from (i, j) on, by ``step``, are equal and not None."""
    run = 0
    while run < n and ka[i] is not None and ka[i] == kb[j]:
        run, i, j = run + 1, i + step, j + step
    return run


def common_prefix(x: str, y: str) -> int:
    n = min(len(x), len(y))
    i = 0
    while i < n:
        j = min(i + PREFIX_CHUNK, n)
        if x[i:j] != y[i:j]:
            while x[i] == y[i]:
                i += 1
            return i
        i = j
    return n


def common_suffix(x: str, y: str, limit: int) -> int:
    # Reversing costs a copy in C, far less than comparing character by character.
    return common_prefix(x[len(x) - limit :][::-1], y[len(y) - limit :][::-1])
