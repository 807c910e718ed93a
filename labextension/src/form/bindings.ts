/**
 * Slot bindings in the form without hand-written JSON: presets for the periods reports
 * ask for, grouped as people think of them (a day, the previous week Monday–Sunday,
 * month to date, the previous month, the previous quarter, the data interval), and a
 * builder — base, one shift, one snap, a format — for the rest. Both produce the
 * closed JSON vocabulary of `nbcast.definitions.bindings`; a binding that fits neither
 * (several shifts, a calendar) stays editable as JSON.
 *
 * Pure TypeScript with no Lab import, so it is unit-tested in node.
 */
import type { Block, Json } from './model';

export interface BindingPreset {
  id: string;
  group: string;
  label: string;
  value: Block;
}

const slot = (steps: Block[], format?: string): Block =>
  format ? { $period: 'slot', steps, format } : { $period: 'slot', steps };

/** Slot bindings offered as choices (bindings.py's vocabulary; all resolve to text). */
export const BINDING_PRESETS: BindingPreset[] = [
  { id: 'slot', group: 'Day', label: "the slot's date", value: { $period: 'slot' } },
  { id: 'previous_day', group: 'Day', label: 'the day before the slot', value: slot([{ days: -1 }]) },
  {
    id: 'previous_business_day',
    group: 'Day',
    label: 'previous business day of the slot',
    value: slot([{ business_days: -1 }])
  },
  {
    id: 'previous_week_start',
    group: 'Previous week (Monday–Sunday)',
    label: 'previous week: its Monday',
    value: slot([{ weeks: -1 }, { to: 'start_of_week' }])
  },
  {
    id: 'last_week_end',
    group: 'Previous week (Monday–Sunday)',
    label: 'previous week: its Sunday',
    value: slot([{ weeks: -1 }, { to: 'end_of_week' }])
  },
  {
    id: 'month_start',
    group: 'Month to date',
    label: "month to date: first day of the slot's month (to the slot's date)",
    value: slot([{ to: 'start_of_month' }])
  },
  {
    id: 'previous_month_start',
    group: 'Previous month',
    label: 'previous month: its first day',
    value: slot([{ months: -1 }, { to: 'start_of_month' }])
  },
  {
    id: 'previous_month_end',
    group: 'Previous month',
    label: 'previous month: its last day',
    value: slot([{ months: -1 }, { to: 'end_of_month' }])
  },
  {
    id: 'previous_month',
    group: 'Previous month',
    label: 'previous month (YYYY-MM)',
    value: slot([{ months: -1 }], '%Y-%m')
  },
  {
    id: 'previous_quarter_start',
    group: 'Previous quarter',
    label: 'previous quarter: its first day',
    value: slot([{ months: -3 }, { to: 'start_of_quarter' }])
  },
  {
    id: 'previous_quarter_end',
    group: 'Previous quarter',
    label: 'previous quarter: its last day',
    value: slot([{ months: -3 }, { to: 'end_of_quarter' }])
  },
  {
    id: 'interval_start',
    group: 'Data interval',
    label: "start of the slot's data interval",
    value: { $period: 'interval_start' }
  },
  {
    id: 'interval_end',
    group: 'Data interval',
    label: "end of the slot's data interval",
    value: { $period: 'interval_end' }
  }
];

/** A binding as the builder's fields. */
export interface BindingBuild {
  base: 'slot' | 'interval_start' | 'interval_end';
  /** A whole number, as typed ('' or '0': no shift). */
  amount: string;
  unit: 'days' | 'business_days' | 'weeks' | 'months' | 'hours';
  /** '' for no snap. */
  snap: string;
  /** 'date', 'datetime' or a strftime pattern. */
  format: string;
}

export const BUILD_BASES: [BindingBuild['base'], string][] = [
  ['slot', "the slot's time"],
  ['interval_start', 'the data interval’s start'],
  ['interval_end', 'the data interval’s end']
];
export const BUILD_UNITS: [BindingBuild['unit'], string][] = [
  ['days', 'days'],
  ['business_days', 'business days'],
  ['weeks', 'weeks'],
  ['months', 'months'],
  ['hours', 'hours']
];
export const BUILD_SNAPS: [string, string][] = [
  ['', 'as it is'],
  ['start_of_week', 'start of that week (Monday)'],
  ['end_of_week', 'end of that week (Sunday)'],
  ['start_of_month', 'start of that month'],
  ['end_of_month', 'end of that month'],
  ['start_of_quarter', 'start of that quarter'],
  ['end_of_quarter', 'end of that quarter']
];
export const BUILD_FORMATS: [string, string][] = [
  ['date', 'a date (2026-12-04)'],
  ['datetime', 'a date and time with offset'],
  ['%Y-%m', 'a month (2026-12)'],
  ['%Y', 'a year (2026)']
];

export const DEFAULT_BUILD: BindingBuild = { base: 'slot', amount: '-1', unit: 'days', snap: '', format: 'date' };

/** The binding the builder's fields stand for, or an error. */
export function buildBinding(build: BindingBuild): { value?: Block; error?: string } {
  const text = build.amount.trim();
  if (text !== '' && !/^[+-]?\d{1,4}$/.test(text)) {
    return { error: 'the shift must be a whole number from -9999 to 9999' };
  }
  const amount = text === '' ? 0 : Number(text);
  const steps: Block[] = [];
  if (amount !== 0) {
    steps.push({ [build.unit]: amount });
  }
  if (build.snap) {
    steps.push({ to: build.snap });
  }
  const value: Block = { $period: build.base };
  if (steps.length) {
    value.steps = steps;
  }
  if (build.format && build.format !== 'date') {
    value.format = build.format;
  }
  return { value };
}

const isBlock = (value: unknown): value is Block =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** The builder's fields for `binding`, when it fits them (else null: JSON it is). */
export function buildOf(binding: Json): BindingBuild | null {
  if (!isBlock(binding)) return null;
  const keys = Object.keys(binding);
  if (keys.some(k => !['$period', 'steps', 'format'].includes(k))) return null;
  const base = binding.$period;
  if (base !== 'slot' && base !== 'interval_start' && base !== 'interval_end') return null;
  const build: BindingBuild = { base, amount: '0', unit: 'days', snap: '', format: 'date' };
  const steps = binding.steps ?? [];
  if (!Array.isArray(steps) || steps.length > 2) return null;
  let index = 0;
  const first = steps[0];
  if (isBlock(first) && !('to' in first)) {
    const unit = Object.keys(first);
    const found = BUILD_UNITS.find(([u]) => u === unit[0]);
    if (unit.length !== 1 || !found || typeof first[unit[0]] !== 'number') return null;
    build.unit = found[0];
    build.amount = String(first[unit[0]]);
    index = 1;
  }
  const snap = steps[index];
  if (snap !== undefined) {
    if (!isBlock(snap) || Object.keys(snap).length !== 1 || typeof snap.to !== 'string') return null;
    if (!BUILD_SNAPS.some(([s]) => s === snap.to)) return null;
    build.snap = snap.to;
    index += 1;
  }
  if (index !== steps.length) return null;
  if (binding.format !== undefined) {
    if (typeof binding.format !== 'string') return null;
    build.format = binding.format;
  }
  return build;
}

/** What each bound parameter resolves to in the first `count` previewed slots that fire
 * (the preview's rows carry `parameters` when asked with bindings). */
export function resolvedValues(
  rows: { status: string; parameters?: { [name: string]: Json } }[],
  count = 3
): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const row of rows.filter(r => r.status !== 'skipped').slice(0, count)) {
    for (const [name, value] of Object.entries(row.parameters ?? {})) {
      (out[name] ??= []).push(typeof value === 'string' ? value : JSON.stringify(value));
    }
  }
  return out;
}
