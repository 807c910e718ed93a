import {
  describeSchedule,
  durationSeconds,
  fireLine,
  previewLines,
  previewQuery,
  previewRanges
} from '../form/preview';
import type { PreviewRow } from '../form/model';

const row = (local: string, note: string | null = null, status = 'scheduled'): PreviewRow => ({
  slot_key: local.slice(0, 16),
  local,
  fire_at: '',
  status,
  reason: status === 'skipped' ? 'dst_gap' : null,
  note
});

describe('describeSchedule', () => {
  it('says a cron in words, in its zone', () => {
    expect(describeSchedule('cron', '30 2 * * *', '', 'America/New_York')).toEqual({
      ok: true,
      text: 'At 02:30 (America/New_York time)'
    });
    expect(describeSchedule('cron', '0 7 * * 1-5', '', 'UTC').text).toBe(
      'At 07:00, Monday through Friday (UTC time)'
    );
  });
  it("knows nbcast's macros", () => {
    expect(describeSchedule('cron', '@daily', '', 'UTC').text).toBe('At 00:00 (UTC time)');
    expect(describeSchedule('cron', ' @Hourly ', '', 'UTC').text).toBe('Every hour (UTC time)');
  });
  it('refuses what is not a five-field cron or an interval', () => {
    expect(describeSchedule('cron', '* * *', '', 'UTC')).toEqual({
      ok: false,
      text: 'A cron has five fields: minute hour day-of-month month day-of-week.'
    });
    expect(describeSchedule('cron', '61 * * * *', '', 'UTC').ok).toBe(false);
    expect(describeSchedule('every', '', 'soon', 'UTC').ok).toBe(false);
  });
  it('says an interval in words', () => {
    expect(describeSchedule('every', '', '1h30m', 'UTC').text).toBe(
      "Every 1 hour 30 minutes, counted from the schedule's anchor (no DST effects)."
    );
    expect(durationSeconds('1h30m')).toBe(5400);
    expect(durationSeconds('2d')).toBe(172800);
    expect(durationSeconds('h')).toBeNull();
  });
});

describe('fireLine and previewLines', () => {
  it("shows the zone's wall time and offset, not the browser's", () => {
    expect(fireLine(row('2026-03-08T03:00:00-04:00', '02:30 does not exist on 2026-03-08 (clocks go forward): runs at 03:00 EDT'))).toEqual({
      when: 'Sun 2026-03-08 03:00',
      offset: 'UTC−04:00',
      skipped: false,
      note: '02:30 does not exist on 2026-03-08 (clocks go forward): runs at 03:00 EDT'
    });
    expect(fireLine(row('2026-10-25T02:30:00+00:00')).offset).toBe('UTC');
    expect(fireLine(row('2026-03-29T02:30:00+01:00', null, 'skipped'))).toEqual({
      when: 'Sun 2026-03-29 02:30',
      offset: 'UTC+01:00',
      skipped: true,
      note: 'dst_gap'
    });
  });
  it('lists the next five, then the DST notes further ahead', () => {
    const rows = [
      ...Array.from({ length: 8 }, (_, i) => row(`2026-03-0${i + 1}T02:30:00-05:00`)),
      row('2026-03-09T03:00:00-04:00', 'gap note'),
      row('2026-03-10T02:30:00-04:00'),
      row('2026-11-01T01:30:00-04:00', 'fold note 1'),
      row('2026-11-01T01:30:00-05:00', 'fold note 2'),
      row('2027-03-14T03:00:00-04:00', 'gap note 2')
    ];
    const { next, ahead } = previewLines(rows);
    expect(next.map(l => l.when)).toEqual([
      'Sun 2026-03-01 02:30',
      'Mon 2026-03-02 02:30',
      'Tue 2026-03-03 02:30',
      'Wed 2026-03-04 02:30',
      'Thu 2026-03-05 02:30'
    ]);
    expect(ahead.map(l => l.note)).toEqual(['gap note', 'fold note 1', 'fold note 2']);
  });
});

describe('previewQuery and previewRanges', () => {
  it('asks for a year, then a week, then a day', () => {
    const ranges = previewRanges(new Date('2026-12-02T04:00:00.123Z'));
    expect(ranges).toEqual([
      { from: '2026-12-02T04:00:00Z', until: '2028-01-06T04:00:00Z' },
      { from: '2026-12-02T04:00:00Z', until: '2026-12-09T04:00:00Z' },
      { from: '2026-12-02T04:00:00Z', until: '2026-12-03T04:00:00Z' }
    ]);
  });
  it('passes the zone and DST policies, and nothing for a manual report or an empty field', () => {
    const range = { from: 'a', until: 'b' };
    expect(previewQuery('cron', ' 0 7 * * * ', '', 'Europe/Berlin', 'skip', '', range)).toEqual({
      cron: '0 7 * * *',
      tz: 'Europe/Berlin',
      from: 'a',
      until: 'b',
      limit: '10000',
      dst_gap: 'skip'
    });
    expect(previewQuery('every', '', '15m', 'UTC', '', 'both', range)).toEqual({
      every: '15m',
      tz: 'UTC',
      from: 'a',
      until: 'b',
      limit: '10000',
      dst_fold: 'both'
    });
    expect(previewQuery('manual', '0 7 * * *', '', 'UTC', '', '', range)).toBeNull();
    expect(previewQuery('cron', '', '', 'UTC', '', '', range)).toBeNull();
  });
});
