import {
  BINDING_PRESETS,
  DEFAULT_BUILD,
  buildBinding,
  buildOf,
  resolvedValues,
  type BindingBuild
} from '../form/bindings';
import { canonical, formBindings, parameterInputs } from '../form/model';

describe('the binding builder', () => {
  it('builds the closed vocabulary from its fields', () => {
    const build: BindingBuild = { base: 'slot', amount: '-1', unit: 'weeks', snap: 'start_of_week', format: 'date' };
    expect(buildBinding(build).value).toEqual({
      $period: 'slot',
      steps: [{ weeks: -1 }, { to: 'start_of_week' }]
    });
    expect(buildBinding({ ...DEFAULT_BUILD, amount: '0', format: '%Y-%m' }).value).toEqual({
      $period: 'slot',
      format: '%Y-%m'
    });
    expect(buildBinding({ ...DEFAULT_BUILD, amount: '1.5' }).error).toMatch(/whole number/);
    expect(buildBinding({ ...DEFAULT_BUILD, amount: '1e9' }).error).toMatch(/whole number/);
  });

  it('reads back what it built, and refuses what it cannot show', () => {
    for (const preset of BINDING_PRESETS) {
      const build = buildOf(preset.value);
      if (build) expect(canonical(buildBinding(build).value)).toBe(canonical(preset.value));
    }
    expect(buildOf({ $period: 'slot', steps: [{ business_days: -1, calendar: 'DE' }] })).toBeNull();
    expect(buildOf({ $period: 'slot', steps: [{ days: -1 }, { days: -1 }] })).toBeNull();
    expect(buildOf({ $period: 'now' })).toBeNull();
  });

  it('opens a binding the presets do not name in the builder', () => {
    const schema = [{ name: 'day', type: 'str', default: '2026-01-01', help: '' }];
    const [input] = parameterInputs(schema, { day: { $period: 'interval_end', steps: [{ days: -2 }] } });
    expect([input.mode, input.binding, input.build.amount, input.build.base]).toEqual([
      'binding',
      'build',
      '-2',
      'interval_end'
    ]);
    expect(formBindings([input])).toEqual({ day: { $period: 'interval_end', steps: [{ days: -2 }] } });
  });

  it('lists the first three firing slots’ resolved values per parameter', () => {
    const rows = [
      { status: 'skipped', parameters: { day: 'x' } },
      { status: 'scheduled', parameters: { day: '2026-12-03' } },
      { status: 'scheduled', parameters: { day: '2026-12-04' } },
      { status: 'scheduled', parameters: { day: '2026-12-07' } },
      { status: 'scheduled', parameters: { day: '2026-12-08' } }
    ];
    expect(resolvedValues(rows)).toEqual({ day: ['2026-12-03', '2026-12-04', '2026-12-07'] });
  });

  it('offers the periods reports ask for', () => {
    const groups = new Set(BINDING_PRESETS.map(p => p.group));
    expect([...groups]).toEqual([
      'Day',
      'Previous week (Monday–Sunday)',
      'Month to date',
      'Previous month',
      'Previous quarter',
      'Data interval'
    ]);
  });
});
