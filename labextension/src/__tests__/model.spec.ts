import {
  BINDING_PRESETS,
  blockToForm,
  fieldKey,
  formToBlock,
  parseValue,
  type Block,
  type ParameterSpec
} from '../form/model';

const schema: ParameterSpec[] = [
  { name: 'report_date', type: 'str', default: '2026-01-01', help: 'The day the report covers' },
  { name: 'region', type: 'str', default: 'all', help: '' },
  { name: 'top_n', type: 'int', default: 10, help: 'Rows in the table' },
  { name: 'threshold', type: 'float', default: 0.5, help: '' },
  { name: 'strict', type: 'bool', default: false, help: '' },
  { name: 'stores', type: 'list', default: [], help: '' }
];
const defaults = { name: 'daily-sales', timezone: 'America/New_York' };

describe('blockToForm', () => {
  it('starts a notebook without a block on a daily cron in the browser zone, html out, all defaults', () => {
    const form = blockToForm(null, schema, defaults);
    expect(form.name).toBe('daily-sales');
    expect(form.kind).toBe('cron');
    expect(form.cron).toBe('0 7 * * *');
    expect(form.timezone).toBe('America/New_York');
    expect(form.outputs).toEqual(['html']);
    expect(form.subscriptions).toEqual([]);
    expect(form.parameters.map(p => [p.name, p.mode, p.text])).toEqual([
      ['report_date', 'default', '2026-01-01'],
      ['region', 'default', 'all'],
      ['top_n', 'default', '10'],
      ['threshold', 'default', '0.5'],
      ['strict', 'default', 'false'],
      ['stores', 'default', '[]']
    ]);
  });

  it('reads every field of a published block back', () => {
    const block: Block = {
      name: 'sales',
      description: 'kept',
      schedule: {
        cron: '30 2 * * *',
        timezone: 'Europe/Berlin',
        dst: { gap: 'skip', fold: 'both' },
        misfire: { policy: 'run_all', grace: '5m', max_catchup: 7 },
        overlap: 'buffer_one',
        staleness: { after: '2h', action: 'suppress' },
        jitter: '30s'
      },
      parameters: {
        report_date: { $period: 'slot', steps: [{ business_days: -1 }] },
        region: { $period: 'slot', steps: [{ days: 2 }] },
        top_n: 25
      },
      outputs: ['html', 'pdf'],
      subscriptions: [
        { channel: 'email', to: 'a@example.com', formats: ['pdf'] },
        { channel: 'email', to: 'b@example.com', formats: ['pdf'] },
        { channel: 'slack', to: '#sales', only_if: 'results' },
        { channel: 'email', to: 'lead@example.com', parameters: { region: 'north' } }
      ]
    };
    const form = blockToForm(block, schema, defaults);
    expect(form.name).toBe('sales');
    expect(form.cron).toBe('30 2 * * *');
    expect(form.timezone).toBe('Europe/Berlin');
    expect(form.advanced).toEqual({
      dstGap: 'skip',
      dstFold: 'both',
      misfire: 'run_all',
      grace: '5m',
      maxCatchup: '7',
      overlap: 'buffer_one',
      stalenessAfter: '2h',
      stalenessAction: 'suppress',
      jitter: '30s'
    });
    const [date, region, top] = form.parameters;
    expect([date.mode, date.binding]).toEqual(['binding', 'previous_business_day']);
    // Not a preset, but one shift: it opens in the builder, its JSON kept.
    expect([region.mode, region.binding, JSON.parse(region.bindingJson), region.build.amount]).toEqual([
      'binding',
      'build',
      { $period: 'slot', steps: [{ days: 2 }] },
      '2'
    ]);
    expect([top.mode, top.text]).toEqual(['value', '25']);
    expect(form.subscriptions).toEqual([
      { channel: 'email', recipients: 'a@example.com, b@example.com', formats: ['pdf'], onlyIf: '', scope: null },
      { channel: 'slack', recipients: '#sales', formats: [], onlyIf: 'results', scope: null },
      {
        channel: 'email',
        recipients: 'lead@example.com',
        formats: [],
        onlyIf: '',
        scope: { parameters: { region: 'north' } }
      }
    ]);
    // And back: the same block, key for key (the hand-written description kept).
    const result = formToBlock(form, schema, block);
    expect(result.errors).toEqual({});
    expect(result.block).toEqual(block);
    expect(result.subscriptionRow).toEqual([0, 0, 1, 2]);
  });

  it('reads a block without a schedule as a manual report', () => {
    expect(blockToForm({ outputs: ['csv'] }, [], defaults).kind).toBe('manual');
    expect(blockToForm({ schedule: { every: '15m' } }, [], defaults).kind).toBe('every');
  });
});

describe('formToBlock', () => {
  it('writes only what was chosen: defaults omitted, one subscription per recipient', () => {
    const form = blockToForm(null, schema, defaults);
    form.parameters[0].mode = 'binding';
    form.parameters[0].binding = 'previous_business_day';
    form.parameters[2].mode = 'value';
    form.parameters[2].text = ' 42 ';
    form.parameters[4].mode = 'value';
    form.parameters[4].text = 'true';
    form.parameters[5].mode = 'value';
    form.parameters[5].text = '["s1", "s2"]';
    form.subscriptions = [
      { channel: 'email', recipients: 'cfo@example.com;\nops@example.com, ', formats: [], onlyIf: 'changed', scope: null }
    ];
    const { block, errors } = formToBlock(form, schema, null);
    expect(errors).toEqual({});
    expect(block).toEqual({
      name: 'daily-sales',
      schedule: { cron: '0 7 * * *', timezone: 'America/New_York' },
      parameters: {
        report_date: { $period: 'slot', steps: [{ business_days: -1 }] },
        top_n: 42,
        strict: true,
        stores: ['s1', 's2']
      },
      outputs: ['html'],
      subscriptions: [
        { channel: 'email', to: 'cfo@example.com', only_if: 'changed' },
        { channel: 'email', to: 'ops@example.com', only_if: 'changed' }
      ]
    });
  });

  it('reports what the form itself can tell is wrong, keyed by field, and drops the schedule of a manual report', () => {
    const form = blockToForm({ schedule: { cron: '0 7 * * *', start: '2026-01-01T00:00' } }, schema, defaults);
    form.cron = '  ';
    form.parameters[2].mode = 'value';
    form.parameters[2].text = '4.5';
    form.parameters[1].mode = 'binding';
    form.parameters[1].binding = 'custom';
    form.parameters[1].bindingJson = '{"days": 1}';
    form.outputs = [];
    form.advanced.maxCatchup = 'many';
    form.subscriptions = [{ channel: 'email', recipients: ' , ', formats: [], onlyIf: '', scope: null }];
    const { errors, block } = formToBlock(form, schema, null);
    expect(errors).toEqual({
      cron: 'a cron expression is required (minute hour day month weekday)',
      maxCatchup: 'max catch-up must be a whole number',
      'parameter:top_n': 'top_n must be a whole number',
      'parameter:region': 'region: a binding is a JSON object with "$period"',
      outputs: 'choose at least one output format',
      'subscription:0': 'add at least one recipient (or remove the row)'
    });
    expect(block.subscriptions).toBeUndefined();
    form.kind = 'manual';
    const manual = formToBlock(form, schema, { schedule: { cron: '0 7 * * *' }, sla: { delivered_within: '1h' } });
    expect(manual.block.schedule).toBeUndefined();
    expect(manual.block.sla).toEqual({ delivered_within: '1h' });
  });

  it('keeps the schedule window (start, end) written by hand', () => {
    const original = { schedule: { cron: '0 7 * * 1', timezone: 'UTC', start: '2026-01-05T00:00', end: '2027-01-01T00:00' } };
    const form = blockToForm(original, [], defaults);
    form.cron = '0 8 * * 1';
    expect(formToBlock(form, [], original).block.schedule).toEqual({
      cron: '0 8 * * 1',
      timezone: 'UTC',
      start: '2026-01-05T00:00',
      end: '2027-01-01T00:00'
    });
  });

  it('offers every preset as a binding that round-trips to its own id', () => {
    for (const preset of BINDING_PRESETS) {
      const form = blockToForm({ parameters: { report_date: preset.value } }, schema, defaults);
      expect(form.parameters[0].binding).toBe(preset.id);
      expect(formToBlock(form, schema, null).block.parameters).toEqual({ report_date: preset.value });
    }
  });
});

describe('parameters named like what every object inherits', () => {
  const odd: ParameterSpec[] = [
    { name: 'constructor', type: 'int', default: 1, help: '' },
    { name: 'toString', type: 'str', default: 'x', help: '' },
    { name: '__proto__', type: 'str', default: 'y', help: '' }
  ];
  it('are read and written as the block\'s own keys', () => {
    const form = blockToForm({ parameters: { toString: 'given' } }, odd, defaults);
    expect(form.parameters.map(p => [p.name, p.mode, p.text])).toEqual([
      ['constructor', 'default', '1'],
      ['toString', 'value', 'given'],
      ['__proto__', 'default', 'y']
    ]);
    form.parameters[0].mode = 'value';
    form.parameters[0].text = '2';
    form.parameters[2].mode = 'value';
    form.parameters[2].text = 'z';
    const { block, errors } = formToBlock(form, odd, null);
    expect(errors).toEqual({});
    expect(JSON.parse(JSON.stringify(block.parameters))).toEqual(
      JSON.parse('{"constructor": 2, "toString": "given", "__proto__": "z"}')
    );
    expect(Object.keys(block.parameters as object)).toEqual(['constructor', 'toString', '__proto__']);
  });
});

describe('parseValue', () => {
  const spec = (type: string): ParameterSpec => ({ name: 'p', type, default: null, help: '' });
  it('types a literal by its annotation', () => {
    expect(parseValue(spec('int'), '-3')).toEqual({ value: -3 });
    expect(parseValue(spec('int'), '3.0')).toEqual({ error: 'p must be a whole number' });
    expect(parseValue(spec('float'), '1e3')).toEqual({ value: 1000 });
    expect(parseValue(spec('float'), 'NaN')).toEqual({ error: 'p must be a number' });
    expect(parseValue(spec('float'), '')).toEqual({ error: 'p must be a number' });
    expect(parseValue(spec('bool'), 'True')).toEqual({ value: true });
    expect(parseValue(spec('bool'), 'yes')).toEqual({ error: 'p must be true or false' });
    expect(parseValue(spec('str'), ' 42 ')).toEqual({ value: ' 42 ' });
    expect(parseValue(spec('dict'), '{"a": 1}')).toEqual({ value: { a: 1 } });
    expect(parseValue(spec('dict'), '{a: 1}')).toEqual({ error: 'p must be a JSON object' });
    expect(parseValue(spec('any'), 'north')).toEqual({ value: 'north' });
    expect(parseValue(spec('any'), '7')).toEqual({ value: 7 });
  });
});

describe('fieldKey', () => {
  const result = { subscriptionRow: [0, 0, 1] };
  const names = ['report_date', 'top_n'];
  it('puts a server error next to the field it names', () => {
    expect(fieldKey('schedule.cron', result, names)).toBe('cron');
    expect(fieldKey('schedule.timezone', result, names)).toBe('timezone');
    expect(fieldKey('schedule.misfire.max_catchup', result, names)).toBe('maxCatchup');
    expect(fieldKey('outputs[1]', result, names)).toBe('outputs');
    expect(fieldKey('subscriptions[1].to', result, names)).toBe('subscription:0');
    expect(fieldKey('subscriptions[2].formats', result, names)).toBe('subscription:1');
    expect(fieldKey('subscriptions[9].to', result, names)).toBe('subscriptions');
    expect(fieldKey('parameters.top_n', result, names)).toBe('parameter:top_n');
    // the field, not the message, names the parameter
    expect(fieldKey('parameters', result, names)).toBe('parameters');
    expect(fieldKey('parameters.zz', result, names)).toBe('parameters');
    expect(fieldKey('name', result, names)).toBe('name');
    expect(fieldKey(null, result, names)).toBe('general');
    expect(fieldKey('sla.delivered_within', result, names)).toBe('general');
  });
});
