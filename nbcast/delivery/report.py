"""What renderers and channels are told about the report they handle."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

__all__ = ["ReportInfo"]


@dataclass(frozen=True, kw_only=True)
class ReportInfo:
    """One run of a report definition, as delivery sees it.

    Everything here comes from the run and its pinned version, never from the
    wall clock at render time: renderers derive every timestamp they write (PDF
    metadata, zip entries, xlsx document properties) from :attr:`fire_at`, which is
    what makes their output byte-identical when the same run is rendered again.
    """

    tenant: str
    definition: str
    version: int
    run_id: int
    slot_key: str | None
    """The slot's wall-clock key (``2026-10-30T07:00``), None for a manual run."""
    fire_at: datetime
    """The slot's instant (UTC); a manual run's request time."""
    finished_at: datetime
    """When the run ended (UTC)."""
    timezone: str = "UTC"
    """The definition's schedule zone, for showing times to people."""
    late_by: timedelta | None = None
    """Set when the report is delivered past its ``staleness.after``: renderers show a
    banner saying how late it is."""
    description: str = ""
    interval_start: datetime | None = None
    """The start of the period the report covers (its run's data interval), in the
    schedule's zone; None for a run without one."""
    interval_end: datetime | None = None
    test: bool = False
    """A test run (:mod:`nbcast.scheduler.trial`): its message says ``TEST`` in the
    subject and a banner; its rendered files are the report's own, so a dry run of a
    slot renders what the slot will (its ``slot_key`` and ``fire_at`` are the slot's)."""

    @property
    def title(self) -> str:
        """``daily-sales — 2026-10-30T07:00`` (or ``— run 42`` for a manual run)."""
        return f"{self.definition} — {self.slot_key or f'run {self.run_id}'}"

    @property
    def stem(self) -> str:
        """A file name stem without a suffix: ``daily-sales_2026-10-30T0700``."""
        slot = (self.slot_key or f"run-{self.run_id}").replace(":", "").replace("~", "_")
        return f"{self.definition}_{slot}"

    @property
    def source_date_epoch(self) -> int:
        """The slot's instant as Unix seconds (``SOURCE_DATE_EPOCH``)."""
        return int(self.fire_at.timestamp())

    def late(self, now: datetime) -> ReportInfo:
        """This report as delivered late at ``now``: ``late_by`` in whole minutes (so
        the banner's text, and the rendered bytes, do not change within a minute)."""
        minutes = int(max(now - self.fire_at, timedelta(0)).total_seconds() // 60)
        return replace(self, late_by=timedelta(minutes=minutes))
