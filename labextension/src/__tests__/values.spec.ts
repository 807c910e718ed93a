import { shownValue } from '../values';

describe('shownValue', () => {
  it('shows nothing as a dash, never null', () => {
    expect(shownValue(null)).toBe('—');
    expect(shownValue(undefined)).toBe('—');
    expect(shownValue('')).toBe('—');
  });

  it('shows instants to the second', () => {
    expect(shownValue('2026-11-02T07:00:00.123456+00:00')).toBe('2026-11-02 07:00:00+00:00');
    expect(shownValue('2026-11-02T07:00:05Z')).toBe('2026-11-02 07:00:05Z');
    expect(shownValue('2026-11-01T01:30-04:00')).toBe('2026-11-01 01:30:00-04:00');
    expect(shownValue('2026-11-02T07:00:00')).toBe('2026-11-02 07:00:00');
  });

  it('shows other values as they are', () => {
    expect(shownValue('APAC')).toBe('APAC');
    expect(shownValue('2026-11-02')).toBe('2026-11-02');
    expect(shownValue(5)).toBe('5');
    expect(shownValue(false)).toBe('false');
    expect(shownValue(['a', 1])).toBe('["a",1]');
  });
});
