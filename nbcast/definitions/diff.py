"""Differences between two versions of a report definition: nbdime's diff, bounded.

Versions are stored normalized (no outputs), so a diff shows what a reviewer cares
about: sources, the parameters cell, the ``nbcast`` block and other metadata.

``nbdime.diff_notebooks`` is quadratic in several places: it aligns cells, and the
lines of each source, with a brute-force LCS grid; it pairs changed lines and cells
by ``difflib`` ratio; and it diffs each paired line character by character with
``difflib`` (autojunk off), quadratic in the line's length and far worse on
repetitive text: a one-character change in a 20,000-character line took a minute.
:func:`diff_notebooks_bounded` calls nbdime's generic ``diff`` with a ``DiffConfig``
of its own, nbdime's notebook predicates and differs with the costly ones wrapped
(``diff_notebooks`` is ``diff(a, b, config=notebook_config)`` and takes no config
itself). Nothing is monkeypatched; the result is an ordinary nbdime diff that
``nbdime.patch`` and nbdime's printer accept. A notebook within the limits below
diffs exactly as with ``diff_notebooks``; a larger one is anchored first and almost
always comes out the same. Large or pathological input is bounded by three rules:

- **Long lines are atoms.** A line over ``LONG_LINE`` (1,000) characters is never
  compared by ratio nor diffed by character: a changed long line is removed and
  inserted. Code and prose lines are shorter; longer ones are data (tables, base64
  images, minified JSON) whose character diff nobody reads.
- **Alignment is anchored.** Cells, lines and list items are first aligned on keys
  found exactly once on each side (cell ids, then cell contents; lines; items), as
  ``git diff --patience`` does, and on the equal runs at both ends of each gap:
  O(n log n) a pass, at most ``_ANCHOR_PASSES`` (4) passes' worth. Only a gap of at
  most ``CELL_GAP_PAIRS`` (2,500) cell pairs, ``LINE_GAP_PAIRS`` or
  ``LIST_GAP_PAIRS`` (10,000) pairs goes to nbdime's multilevel brute-force
  alignment; a larger one is shown as its items removed and inserted.
- **A work budget.** A diff may spend ``WORK_BUDGET`` (1,000,000) steps, about
  0.2 s here, on nbdime's costly work, each piece charged before it runs: a grid
  10 steps per pair and predicate; a ``difflib`` ratio or character diff the length
  of both strings plus the number of equal character pairs (what difflib's inner
  loop visits, 0.1 to 0.3 microseconds a step). A ratio between cell sources over
  ``CELL_TEXT_LIMIT`` (10,000) characters, or one the budget cannot pay, becomes a
  cheap estimate (common prefix, suffix and unique common lines). With the budget
  spent, items are still anchored, but every gap between anchors is shown as
  removed and inserted lines or cells: the diff gets coarser, never wrong, and the
  first changes in the notebook keep the finest diff.

So two notebooks within the publish limit (4 MB of normalized JSON) diff in well
under a second: besides the budget, the work is linear in their size. Outputs are
not bounded specially (versions have none).

Versions are diffed as ``json.loads`` gives them, never as ``NotebookNode``:
``nbformat.from_dict`` walks every value in Python (for 15,000 cells, longer than the
diff). nbdime reads by attribute only when pairing two outputs, which get shallow
views (:func:`attribute_view`). And the cyclic garbage collector is paused
(:func:`collector_paused`) while a version is parsed, diffed and printed: a diff
makes no cycles worth collecting, yet its allocations made the collector walk the
versions' few hundred thousand containers again and again (up to a third of the
time).

Printing, bounded by ``MAX_RENDER_CHARS`` (``--json`` is
complete), is :mod:`nbcast.definitions.diff_render`'s.
"""

from __future__ import annotations

import contextlib
import gc
import json
import operator
import threading
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

from nbdime.diff_format import MappingDiffBuilder
from nbdime.diffing.config import DiffConfig
from nbdime.diffing.generic import compare_strings_approximate, diff, diff_lists
from nbdime.diffing.lcs import diff_from_lcs
from nbdime.diffing.notebooks import (
    compare_cell_approximate,
    compare_cell_by_ids,
    compare_cell_moderate,
    compare_cell_strict,
    compare_output_approximate,
    compare_output_strict,
    diff_sequence_multilevel,
    diff_single_outputs,
)
from nbdime.diffing.sequences import diff_strings_by_char
from nbdime.diffing.snakes import compute_diff_from_snakes, compute_snakes_multilevel
from nbformat.notebooknode import NotebookNode

from nbcast.definitions.diff_align import (
    common_prefix,
    common_suffix,
    equal_run,
    unique_anchors,
)
from nbcast.definitions.queries import VersionInfo

__all__ = [
    "CELL_GAP_PAIRS",
    "CELL_TEXT_LIMIT",
    "LINE_GAP_PAIRS",
    "LIST_GAP_PAIRS",
    "LONG_LINE",
    "MAX_RENDER_CHARS",
    "WORK_BUDGET",
    "attribute_view",
    "collector_paused",
    "diff_notebooks_bounded",
    "diff_versions",
]


LONG_LINE = 1_000
CELL_GAP_PAIRS = 2_500
LINE_GAP_PAIRS = 10_000
LIST_GAP_PAIRS = 10_000
CELL_TEXT_LIMIT = 10_000
WORK_BUDGET = 1_000_000
MAX_RENDER_CHARS = 2_000_000

# Characters compared per budget step when the comparison runs in C (slices, hashing)
# rather than in difflib's Python loops.
_C_CHARS_PER_STEP = 64
# Passes over a sequence that anchoring may make before gaps are left unaligned.
_ANCHOR_PASSES = 4
# Steps one predicate call on one pair costs in nbdime's brute-force grid.
_PAIR_STEPS = 10

Snake = tuple[int, int, int]
Rect = tuple[int, int, int, int]
Diff = list[Any]
Keys = tuple[Sequence[Hashable | None], Sequence[Hashable | None]]


class _Rules(dict[str, Any]):
    """Rules by path with a default that is not stored on lookup.

    nbdime's ``defaultdict2`` stores every path it is asked about, and its
    ``diff_dicts`` then mistakes a looked-up path for one that has predicates.
    """

    def __init__(self, default: Any, rules: dict[str, Any]) -> None:
        super().__init__(rules)
        self.default = default

    def __missing__(self, key: str) -> Any:
        return self.default


class _BoundedDiff:
    """One bounded diff: nbdime's notebook rules, the costly ones wrapped (module doc)."""

    def __init__(self) -> None:
        self.budget = WORK_BUDGET
        self.config = DiffConfig(
            predicates=_Rules(
                [operator.__eq__],
                {"/cells/*/outputs": [compare_output_approximate, compare_output_strict]},
            ),
            differs=_Rules(
                self.diff_value,
                {
                    "/cells": self.diff_cells,
                    "/cells/*/source": self.diff_text,
                    "/cells/*/outputs": diff_sequence_multilevel,
                    "/cells/*/outputs/*": self.diff_output,
                    "/cells/*/attachments": self.diff_attachments,
                },
            ),
            atomic_paths={"/cells/*/id": True},
        )
        self.line_config = DiffConfig(differs=_Rules(self.diff_chars, {}))

    # -- the budget ---------------------------------------------------------------

    def spend(self, cost: int) -> bool:
        """Take ``cost`` steps from the budget; False (and nothing taken) if short."""
        if cost > self.budget:
            return False
        self.budget -= cost
        return True

    @staticmethod
    def ratio_cost(x: str, y: str, threshold: float, counts: dict[int, Counter[str]]) -> int:
        """Steps nbdime's ``compare_strings_approximate(x, y, threshold)`` may take."""
        total = len(x) + len(y)
        if 2 * min(len(x), len(y)) < threshold * total:
            return total  # real_quick_ratio stops it after building the matcher
        cx = counts.get(id(x))
        if cx is None:
            cx = counts[id(x)] = Counter(x)
        cy = counts.get(id(y))
        if cy is None:
            cy = counts[id(y)] = Counter(y)
        if 2 * sum(min(n, cy[c]) for c, n in cx.items()) < threshold * total:
            return 2 * total  # quick_ratio stops it
        return 2 * total + sum(n * cy[c] for c, n in cx.items())

    # -- alignment ----------------------------------------------------------------

    def snakes(
        self,
        size: tuple[int, int],
        keys: list[Keys],
        fine: Callable[[Rect], list[Snake]],
        gap_pairs: int,
        fine_steps: int,
    ) -> list[Snake]:
        """Aligned runs (i, j, n) of two sequences: anchors, then ``fine`` in small gaps.

        ``keys[level]`` are both sides' keys at that level (None never matches);
        a gap without anchors at one level is tried at the next. ``fine_steps`` is
        what ``fine`` costs per pair of items in its gap.
        """
        out: list[Snake] = []
        # Anchoring is near-linear per pass; a few passes' worth bounds the patience
        # recursion on adversarial orders.
        allowance = _ANCHOR_PASSES * (size[0] + size[1])
        # Work items, popped in order: a snake to emit, or a gap to solve at a level.
        stack: list[tuple[str, int, int, int, int, int]] = [("gap", 0, 0, *size, 0)]
        while stack:
            kind, i0, j0, i1, j1, level = stack.pop()
            if kind == "snake":
                out.append((i0, j0, i1))
                continue
            if i0 == i1 or j0 == j1:
                continue
            pairs = (i1 - i0) * (j1 - j0)
            # nbdime's brute-force grid visits every pair once per predicate; past the
            # budget, small gaps are anchored like large ones.
            if pairs <= gap_pairs and self.spend(pairs * fine_steps):
                out.extend(fine((i0, j0, i1, j1)))
                continue
            allowance -= (i1 - i0) + (j1 - j0)
            if level >= len(keys) or allowance < 0:
                continue  # shown as removed and inserted
            ka, kb = keys[level]
            p = equal_run(ka, kb, i0, j0, min(i1 - i0, j1 - j0), 1)
            s = equal_run(ka, kb, i1 - 1, j1 - 1, min(i1 - i0, j1 - j0) - p, -1)
            middle = (i0 + p, j0 + p, i1 - s, j1 - s)
            # A 1x1 middle's one pair is the pair equal_run has just found unequal.
            single = middle[2] - middle[0] == 1 and middle[3] - middle[1] == 1
            anchors = [] if single else unique_anchors(ka, kb, middle)
            if not (p or s or anchors):
                stack.append(("gap", i0, j0, i1, j1, level + 1))
                continue
            pieces: list[tuple[str, int, int, int, int, int]] = []
            if p:
                pieces.append(("snake", i0, j0, p, 0, 0))
            ci, cj = middle[0], middle[1]
            for i, j in anchors:
                pieces.append(("gap", ci, cj, i, j, level))
                pieces.append(("snake", i, j, 1, 0, 0))
                ci, cj = i + 1, j + 1
            pieces.append(("gap", ci, cj, middle[2], middle[3], level))
            if s:
                pieces.append(("snake", i1 - s, j1 - s, s, 0, 0))
            stack.extend(reversed(pieces))
        return _merged(out)

    # -- differs (nbdime's signature: a, b, path, config) ---------------------------

    def diff_value(self, a: Any, b: Any, path: str = "", config: Any = None) -> Diff:
        """Any JSON value: strings and lists bounded, dicts through nbdime's walk."""
        if isinstance(a, str) and isinstance(b, str):
            return self.diff_text(a, b)
        if isinstance(a, list) and isinstance(b, list):
            return self.diff_list(a, b, path)
        result: Diff = diff(a, b, path=path, config=self.config)
        return result

    def diff_text(self, a: str, b: str, path: str = "", config: Any = None) -> Diff:
        """nbdime's line-wise string diff (``diff_strings_linewise``), bounded."""
        if a == b:
            return []
        la, lb = a.splitlines(True), b.splitlines(True)
        compares = [self.line_predicate(), operator.__eq__]
        snakes = self.snakes(
            (len(la), len(lb)),
            [(la, lb)],
            lambda rect: list(compute_snakes_multilevel(la, lb, compares, rect)),
            LINE_GAP_PAIRS,
            2 * _PAIR_STEPS,
        )
        result: Diff = compute_diff_from_snakes(la, lb, snakes, path="", config=self.line_config)
        return result

    def line_predicate(self) -> Callable[[str, str], bool]:
        """nbdime's approximate line comparison, with long lines as atoms."""
        counts: dict[int, Counter[str]] = {}

        def similar(x: str, y: str) -> bool:
            if x == y:
                return True
            if len(x) > LONG_LINE or len(y) > LONG_LINE or self.budget <= 0:
                return False
            cost = self.ratio_cost(x, y, 0.7, counts)
            return self.spend(cost) and bool(compare_strings_approximate(x, y))

        return _memoized(similar)

    def diff_chars(self, x: str, y: str, path: str = "", config: Any = None) -> Diff:
        """nbdime's character diff of two paired lines.

        Only lines the predicate paired get here, and it charged at least this much
        for them, so overdrawing is bounded by the budget itself.
        """
        if x == y:
            return []
        self.budget -= self.ratio_cost(x, y, 0.0, {})
        result: Diff = diff_strings_by_char(x, y)
        return result

    def diff_list(self, a: list[Any], b: list[Any], path: str) -> Diff:
        """nbdime's generic list diff (equality, then recursion), bounded."""
        if a == b:
            return []
        ka, kb = [_item_key(x) for x in a], [_item_key(x) for x in b]
        snakes = self.snakes(
            (len(a), len(b)),
            [(ka, kb)],
            lambda rect: list(compute_snakes_multilevel(a, b, [operator.__eq__], rect)),
            LIST_GAP_PAIRS,
            _PAIR_STEPS,
        )
        ai = [i + k for i, _, n in snakes for k in range(n)]
        bi = [j + k for _, j, n in snakes for k in range(n)]
        shallow = diff_from_lcs(a, b, ai, bi)
        result: Diff = diff_lists(a, b, path=path, config=self.config, shallow_diff=shallow)
        return result

    def diff_cells(self, a: list[Any], b: list[Any], path: str = "", config: Any = None) -> Diff:
        """nbdime's cell alignment (ids, then strict to approximate), bounded."""
        counts: dict[int, Counter[str]] = {}
        compares = [
            self.cell_predicate(compare_cell_approximate, 0.7, counts),
            self.cell_predicate(compare_cell_moderate, 0.7, counts),
            self.cell_predicate(compare_cell_strict, 0.95, counts),
            compare_cell_by_ids,
        ]
        snakes = self.snakes(
            (len(a), len(b)),
            [
                ([_cell_id(c) for c in a], [_cell_id(c) for c in b]),
                ([_cell_content(c) for c in a], [_cell_content(c) for c in b]),
            ],
            lambda rect: list(compute_snakes_multilevel(a, b, compares, rect)),
            CELL_GAP_PAIRS,
            4 * _PAIR_STEPS,
        )
        result: Diff = compute_diff_from_snakes(a, b, snakes, path=path, config=self.config)
        return result

    def cell_predicate(
        self, nbdime_compare: Any, threshold: float, counts: dict[int, Counter[str]]
    ) -> Callable[[Any, Any], bool]:
        """One of nbdime's cell comparisons, its source ratio bounded."""
        return _memoized(lambda x, y: self.cells_similar(nbdime_compare, threshold, counts, x, y))

    def cells_similar(
        self,
        nbdime_compare: Any,
        threshold: float,
        counts: dict[int, Counter[str]],
        x: Any,
        y: Any,
    ) -> bool:
        """nbdime's verdict when affordable, else the cheap source estimate."""
        if x.get("cell_type") != y.get("cell_type"):
            return False
        sx, sy = x.get("source"), y.get("source")
        if not (isinstance(sx, str) and isinstance(sy, str)) or sx == sy or not (sx and sy):
            return bool(nbdime_compare(x, y))  # no ratio to compute
        if (
            max(len(sx), len(sy)) <= CELL_TEXT_LIMIT
            and self.budget > 0
            and self.spend(self.ratio_cost(sx, sy, threshold, counts))
        ):
            return bool(nbdime_compare(x, y))
        if not self.text_similar(sx, sy, threshold):
            return False
        # The rest of nbdime's verdict (outputs, for code cells) on equal sources.
        return bool(nbdime_compare({**x, "source": ""}, {**y, "source": ""}))

    def text_similar(self, x: str, y: str, threshold: float) -> bool:
        """Cheap similarity: common prefix, suffix and unique common lines between."""
        total = len(x) + len(y)
        if not (x and y) or 2 * min(len(x), len(y)) <= threshold * total:
            return False
        if not self.spend(total // _C_CHARS_PER_STEP):
            return False
        p = common_prefix(x, y)
        s = common_suffix(x, y, min(len(x), len(y)) - p)
        matched = p + s
        if 2 * matched > threshold * total:
            return True
        ma = x[p : len(x) - s].splitlines(True)
        mb = y[p : len(y) - s].splitlines(True)
        if not self.spend(len(ma) + len(mb)):
            return False
        matched += sum(len(ma[i]) for i, _ in unique_anchors(ma, mb, (0, 0, len(ma), len(mb))))
        return 2 * matched > threshold * total

    def diff_output(self, a: Any, b: Any, path: str = "", config: Any = None) -> Diff:
        """nbdime's ``diff_single_outputs`` (it reads and sets attributes), on views."""
        result: Diff = diff_single_outputs(attribute_view(a), attribute_view(b), path, config)
        return result

    def diff_attachments(
        self, a: dict[str, Any], b: dict[str, Any], path: str = "", config: Any = None
    ) -> Diff:
        """nbdime's ``diff_attachments``, text MIME values diffed bounded."""
        return _diff_mapping(
            a, b, lambda _, x, y: _diff_mapping(x, y, self.diff_mime) if _both(x, y, dict) else None
        )

    def diff_mime(self, mime: str, a: Any, b: Any) -> Diff | None:
        """One MIME value, as nbdime's ``add_mime_diff`` does it (None: replace)."""
        textual = mime.lower().startswith(_SPLIT_MIMES)
        return self.diff_value(a, b) if textual and _both(a, b, (str, list, dict)) else None


_SPLIT_MIMES = ("text/", "image/svg+xml", "application/javascript", "application/json")


def _both(a: Any, b: Any, kind: type | tuple[type, ...]) -> bool:
    return type(a) is type(b) and isinstance(a, kind)


def _diff_mapping(
    a: dict[str, Any], b: dict[str, Any], inner: Callable[[str, Any, Any], Diff | None]
) -> Diff:
    """A dict diff in nbdime's order, each common key by ``inner`` (None: replace)."""
    di = MappingDiffBuilder()
    for key in sorted(a.keys() - b.keys()):
        di.remove(key)
    for key in sorted(a.keys() & b.keys()):
        if a[key] != b[key]:
            sub = inner(key, a[key], b[key])
            if sub is None:
                di.replace(key, b[key])
            else:
                di.patch(key, sub)
    for key in sorted(b.keys() - a.keys()):
        di.add(key, b[key])
    result: Diff = di.validated()
    return result


def attribute_view(value: Any) -> Any:
    """A dict as a shallow ``NotebookNode`` (attribute access to its own keys, the
    values shared, not converted); anything else as it is."""
    if isinstance(value, dict) and not isinstance(value, NotebookNode):
        return NotebookNode(value)
    return value


def _memoized(similar: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    """``similar`` asked once per pair of objects.

    nbdime re-checks every aligned pair; the answer must not change because the
    budget ran out in between. Objects, not values: the sequences outlive the memo.
    """
    memo: dict[tuple[int, int], bool] = {}

    def once(x: Any, y: Any) -> bool:
        key = (id(x), id(y))
        got = memo.get(key)
        if got is None:
            got = memo[key] = similar(x, y)
        return got

    return once


def _merged(snakes: list[Snake]) -> list[Snake]:
    out: list[Snake] = []
    for i, j, n in snakes:
        if out and out[-1][0] + out[-1][2] == i and out[-1][1] + out[-1][2] == j:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + n)
        elif n:
            out.append((i, j, n))
    return out


def _item_key(item: Any) -> Hashable:
    if isinstance(item, (dict, list)):
        return ("json", json.dumps(item, sort_keys=True, default=repr))
    return item if isinstance(item, Hashable) else ("repr", repr(item))


def _cell_id(cell: Any) -> str | None:
    ident = cell.get("id") if isinstance(cell, dict) else None
    return ident if isinstance(ident, str) else None


def _cell_content(cell: Any) -> tuple[Any, str] | None:
    source = cell.get("source") if isinstance(cell, dict) else None
    return (cell.get("cell_type"), source) if isinstance(source, str) else None


_collector_lock = threading.Lock()
_collector_pauses = 0
_collector_was_enabled = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector (module docstring) while the block runs;
    pauses nest and overlap across threads, and the last one to end restores it."""
    global _collector_pauses, _collector_was_enabled
    with _collector_lock:
        if _collector_pauses == 0:
            _collector_was_enabled = gc.isenabled()
            gc.disable()
        _collector_pauses += 1
    try:
        yield
    finally:
        with _collector_lock:
            _collector_pauses -= 1
            if _collector_pauses == 0 and _collector_was_enabled:
                gc.enable()


def diff_notebooks_bounded(a: dict[str, Any], b: dict[str, Any]) -> Diff:
    """nbdime's notebook diff from ``a`` to ``b`` within this module's bounds.

    ``a`` and ``b`` are nbformat v4 notebooks, as plain JSON (``json.loads``) or
    ``NotebookNode`` alike (module docstring); the result is an nbdime diff
    (``nbdime.patch(a, result) == b``).
    """
    with collector_paused():
        result: Diff = diff(a, b, path="", config=_BoundedDiff().config)
    return result


def diff_versions(old: VersionInfo, new: VersionInfo) -> list[dict[str, Any]]:
    """nbdime's structured diff from ``old`` to ``new`` (JSON-serializable, bounded)."""
    with collector_paused():
        a, b = old.notebook, new.notebook
        plain: list[dict[str, Any]] = _plain(diff_notebooks_bounded(a, b))
    return plain


def _plain(entries: Diff) -> list[dict[str, Any]]:
    """Diff entries as plain dicts; the JSON they carry is shared, never walked."""
    out: list[dict[str, Any]] = []
    for e in entries:
        entry = dict(e)
        if "diff" in entry:
            entry["diff"] = _plain(entry["diff"])
        if isinstance(entry.get("valuelist"), tuple):
            entry["valuelist"] = list(entry["valuelist"])
        out.append(entry)
    return out
