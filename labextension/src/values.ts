/**
 * How the panel shows a value of a run's parameters or context: pure, unit-tested.
 *
 * - Nothing (null, undefined, an empty string) is `—`, never a raw `null`.
 * - An ISO 8601 instant is shown to the second: the fraction is dropped, the date and
 *   time separated by a space, the offset kept (`2026-11-02 07:00:00+00:00`).
 * - Any other string as it is; anything else as compact JSON.
 */

const INSTANT = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}(?::\d{2})?)(?:\.\d+)?(Z|[+-]\d{2}:?\d{2})?$/;

/** `value` as the panel shows it (module doc). */
export function shownValue(value: unknown): string {
  if (value === null || value === undefined || value === '') {
    return '—';
  }
  if (typeof value === 'string') {
    const m = INSTANT.exec(value);
    if (m) {
      const time = m[2].length === 5 ? `${m[2]}:00` : m[2];
      return `${m[1]} ${time}${m[3] ?? ''}`;
    }
    return value;
  }
  return JSON.stringify(value);
}
