/**
 * What the dialog shows under the schedule: a plain-language description (cronstrue
 * for a cron, our own words for an interval) and the next fire times in the chosen
 * zone, each with its DST note from the server's preview ("02:30 does not exist on
 * 2026-03-08 (clocks go forward): runs at 03:00 EDT"). Pure, unit-tested in node.
 *
 * The preview endpoint lists the slots of a range and refuses a range with more than
 * `limit` slots, so the dialog asks for a year ahead first (that shows the coming DST
 * changes of a daily or hourly report) and, for a schedule that fires too often for
 * that, a week, then a day ({@link previewRanges}).
 */
import cronstrue from 'cronstrue';

import type { PreviewRow } from './model';

/** How many fire times the dialog lists, and how many DST notes further ahead. */
export const NEXT_SHOWN = 5;
export const NOTES_AHEAD = 3;
export const PREVIEW_LIMIT = 10_000;

const UNITS: Record<string, [string, number]> = {
  s: ['second', 1],
  m: ['minute', 60],
  h: ['hour', 3600],
  d: ['day', 86400],
  w: ['week', 604800]
};

/** The seconds of an nbcast duration (`15m`, `1h30m`, `2d`), or null. */
export function durationSeconds(text: string): number | null {
  const trimmed = text.trim().toLowerCase();
  if (!/^(\d+\s*[smhdw]\s*)+$/.test(trimmed)) {
    return null;
  }
  let total = 0;
  for (const match of trimmed.matchAll(/(\d+)\s*([smhdw])/g)) {
    total += Number(match[1]) * UNITS[match[2]][1];
  }
  return total;
}

function everyWords(text: string): string | null {
  const trimmed = text.trim().toLowerCase();
  if (durationSeconds(trimmed) === null) {
    return null;
  }
  const parts = [...trimmed.matchAll(/(\d+)\s*([smhdw])/g)].map(m => {
    const n = Number(m[1]);
    const unit = UNITS[m[2]][0];
    return n === 1 ? `1 ${unit}` : `${n} ${unit}s`;
  });
  return `Every ${parts.join(' ')}`;
}

/** The schedule in words, or an error message (`ok` false). */
export function describeSchedule(
  kind: 'cron' | 'every' | 'manual',
  cron: string,
  every: string,
  timezone: string
): { ok: boolean; text: string } {
  if (kind === 'manual') {
    return { ok: true, text: 'No schedule: runs only when asked (Run now, or the API).' };
  }
  if (kind === 'every') {
    const words = everyWords(every);
    return words
      ? { ok: true, text: `${words}, counted from the schedule's anchor (no DST effects).` }
      : { ok: false, text: 'An interval is a number and a unit: 15m, 6h, 1d, 1h30m.' };
  }
  const expanded = MACROS[cron.trim().toLowerCase()] ?? cron.trim();
  const fields = expanded.split(/\s+/);
  if (fields.length !== 5) {
    return { ok: false, text: 'A cron has five fields: minute hour day-of-month month day-of-week.' };
  }
  try {
    const words = cronstrue.toString(expanded, {
      use24HourTimeFormat: true,
      throwExceptionOnParseError: true,
      verbose: false
    });
    return { ok: true, text: `${words} (${timezone} time)` };
  } catch (error) {
    return { ok: false, text: String(error).replace(/^Error: /, '') };
  }
}

/** The macros nbcast's cron accepts (nbcast/definitions/cron.py), as their five fields. */
export const MACROS: Record<string, string> = {
  '@yearly': '0 0 1 1 *',
  '@annually': '0 0 1 1 *',
  '@monthly': '0 0 1 * *',
  '@weekly': '0 0 * * 0',
  '@daily': '0 0 * * *',
  '@midnight': '0 0 * * *',
  '@hourly': '0 * * * *'
};

const WEEKDAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];

export interface FireLine {
  /** "Sun 2026-03-08 03:00" in the schedule's zone. */
  when: string;
  /** "UTC-04:00". */
  offset: string;
  skipped: boolean;
  note: string | null;
}

/** One previewed slot as the dialog lists it. Uses only the ISO text of `local`
 * (the zone's wall time and offset, as the server computed them), so it shows the
 * schedule's zone whatever the browser's zone is. */
export function fireLine(row: PreviewRow): FireLine {
  const match = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::\d{2}(?:\.\d+)?)?(Z|[+-]\d{2}:\d{2})?$/.exec(
    row.local
  );
  if (!match) {
    return { when: row.local, offset: '', skipped: row.status === 'skipped', note: row.note ?? null };
  }
  const [, y, mo, d, h, mi, off] = match;
  const weekday = WEEKDAYS[new Date(Date.UTC(Number(y), Number(mo) - 1, Number(d))).getUTCDay()];
  const offset = !off || off === 'Z' || off === '+00:00' ? 'UTC' : `UTC${off.replace('-', '−')}`;
  return {
    when: `${weekday} ${y}-${mo}-${d} ${h}:${mi}`,
    offset,
    skipped: row.status === 'skipped',
    note: row.note ?? (row.status === 'skipped' ? row.reason : null)
  };
}

/** The rows the dialog lists: the next {@link NEXT_SHOWN}, then up to
 * {@link NOTES_AHEAD} later ones that have a DST note (the coming clock changes). */
export function previewLines(rows: PreviewRow[]): { next: FireLine[]; ahead: FireLine[] } {
  const next = rows.slice(0, NEXT_SHOWN).map(fireLine);
  const ahead = rows
    .slice(NEXT_SHOWN)
    .filter(r => r.note)
    .slice(0, NOTES_AHEAD)
    .map(fireLine);
  return { next, ahead };
}

/** The [from, until) ranges to ask the preview for, widest first (module docstring). */
export function previewRanges(now: Date): { from: string; until: string }[] {
  const iso = (ms: number) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
  const start = now.getTime();
  const day = 86_400_000;
  return [400 * day, 7 * day, day].map(span => ({ from: iso(start), until: iso(start + span) }));
}

/** The preview query of a schedule form, or null when there is nothing to preview. */
export function previewQuery(
  kind: 'cron' | 'every' | 'manual',
  cron: string,
  every: string,
  timezone: string,
  dstGap: string,
  dstFold: string,
  range: { from: string; until: string }
): Record<string, string> | null {
  if (kind === 'manual') {
    return null;
  }
  const query: Record<string, string> = {
    tz: timezone,
    from: range.from,
    until: range.until,
    limit: String(PREVIEW_LIMIT)
  };
  if (kind === 'cron') {
    if (!cron.trim()) return null;
    query.cron = cron.trim();
  } else {
    if (!every.trim()) return null;
    query.every = every.trim();
  }
  if (dstGap) query.dst_gap = dstGap;
  if (dstFold) query.dst_fold = dstFold;
  return query;
}

/** The browser's IANA zone (the dialog's default), falling back to UTC. */
export function browserZone(): string {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
  } catch {
    return 'UTC';
  }
}
