"""The time zones a schedule may name, and the canonical zone an alias stands for.

A schedule must mean the same wherever it runs, so it names a canonical IANA location
zone (``zone1970.tab`` and ``zone.tab`` of the tzdata shipped with nbcast), ``UTC`` or
a fixed ``Etc/`` zone (:func:`zone_problem`). A legacy alias (``US/Eastern``,
``Asia/Calcutta`` — what browsers report for India) is refused with the zone it stands
for (:func:`canonical_twin`): the canonical zone whose tzdata rules are the same file
(an alias is a link), else the one that keeps the same UTC offsets.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from nbcast.limits import clip

__all__ = ["canonical_twin", "canonical_zones", "zone_problem"]


def zone_problem(name: str) -> str | None:
    """Why ``name`` is not accepted as a time zone, or None.

    Accepted: the canonical IANA location zones (``zone1970.tab`` and ``zone.tab`` of
    the tzdata shipped with nbcast), ``UTC`` and the fixed ``Etc/`` zones. Refused,
    with a hint: legacy aliases (``US/Eastern``, ``EST5EDT``) and ``localtime``, whose
    meaning depends on the machine — a schedule must mean the same wherever it runs.
    """
    if name in canonical_zones():
        try:
            ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            return f"{clip(name)} is not an IANA time zone"
        return None
    if name == "localtime":
        return "'localtime' means this machine's zone; name the zone (e.g. 'Europe/Berlin')"
    if name in available_timezones():
        hint = canonical_twin(name)
        use = f"; use {hint!r}" if hint else ""
        return f"{clip(name)} is not a canonical IANA location zone{use}"
    return f"{clip(name)} is not an IANA time zone"


_ZONES: frozenset[str] | None = None


def canonical_zones() -> frozenset[str]:
    """The zone names :func:`zone_problem` accepts."""
    global _ZONES
    if _ZONES is None:
        from importlib.resources import files

        names = {"UTC", "Etc/UTC", "Etc/GMT"}
        names |= {f"Etc/GMT{sign}{n}" for sign in "+-" for n in range(1, 15)}
        folder = files("tzdata").joinpath("zoneinfo")
        for table in ("zone1970.tab", "zone.tab"):
            for line in folder.joinpath(table).read_text(encoding="utf-8").splitlines():
                if line and not line.startswith("#"):
                    names.add(line.split("\t")[2])
        _ZONES = frozenset(names)
    return _ZONES


def canonical_twin(name: str) -> str | None:
    """The canonical zone ``name`` stands for: the one whose tzdata rules are the same
    file (an alias is a link: ``US/Eastern`` is ``America/New_York``, ``Zulu`` is
    ``UTC``), else the one that keeps the same UTC offsets (sampled four times a year
    from 1970 to 2040), for the hint; None if none does."""
    from datetime import UTC

    same = _same_zone(name)
    if same:
        return same

    samples = [
        datetime(year, month, 15, 12, tzinfo=UTC)
        for year in range(1970, 2041)
        for month in (1, 4, 7, 10)
    ]

    def offsets(zone: str) -> list[Any]:
        info = ZoneInfo(zone)
        return [instant.astimezone(info).utcoffset() for instant in samples]

    try:
        wanted = offsets(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None
    for candidate in sorted(canonical_zones()):
        try:
            if offsets(candidate) == wanted:
                return candidate
        except (ZoneInfoNotFoundError, ValueError):
            continue
    return None


def _rules(name: str) -> bytes | None:
    """The TZif bytes tzdata ships for zone ``name``, or None."""
    from importlib.resources import files

    if not name or name.startswith("/") or ".." in name.split("/"):
        return None
    try:
        return files("tzdata").joinpath("zoneinfo", *name.split("/")).read_bytes()
    except (OSError, ValueError):
        return None


_SAME_RULES: dict[bytes, list[str]] | None = None


def _same_rules() -> dict[bytes, list[str]]:
    """The canonical zones of each TZif file, best first: ``UTC``; then the zones of
    ``zone1970.tab`` (where tzdata's links point); then the others, by name."""
    global _SAME_RULES
    if _SAME_RULES is None:
        from importlib.resources import files

        primary = set()
        table = files("tzdata").joinpath("zoneinfo", "zone1970.tab").read_text(encoding="utf-8")
        for line in table.splitlines():
            if line and not line.startswith("#"):
                primary.add(line.split("\t")[2])
        index: dict[bytes, list[str]] = {}
        ranked = sorted(canonical_zones(), key=lambda z: (z != "UTC", z not in primary, z))
        for zone in ranked:
            data = _rules(zone)
            if data is not None:
                index.setdefault(data, []).append(zone)
        _SAME_RULES = index
    return _SAME_RULES


def _same_zone(name: str) -> str | None:
    """The canonical zone with ``name``'s rules file: of the same region
    (``Pacific/…``) if one is, else the best (:func:`_same_rules`)."""
    candidates = _same_rules().get(_rules(name) or b"", [])
    region = name.split("/", 1)[0]
    for zone in candidates:
        if "/" in name and zone.split("/", 1)[0] == region:
            return zone
    return candidates[0] if candidates else None
