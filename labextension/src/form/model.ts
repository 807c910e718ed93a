/**
 * The "Schedule as report…" form as plain data, and its two translations: a
 * notebook's `nbcast` metadata block (plus its parameter schema) into the form
 * ({@link blockToForm}), and the form back into the block ({@link formToBlock}).
 * Pure TypeScript with no Lab import, so it is unit-tested in node.
 *
 * Decisions:
 * - A block key the form does not edit (`description`, `sla`, `schedule.start`/`end`,
 *   an audience-scoped subscription's `parameters`/`row_filter`) is kept as it was:
 *   saving the dialog never drops what someone wrote by hand.
 * - An advanced policy left at "server default" is omitted from the block, so the
 *   block says only what was chosen and a later change of nbcast's defaults applies.
 * - Subscriptions are edited as rows of (channel, recipients, formats, only-if); each
 *   recipient becomes one subscription of the block (the ledger's unit), and
 *   subscriptions with scoped parameters or row filters stay one row each, their scope
 *   kept.
 * - A parameter is "default" (omitted: the notebook's own value), a literal value
 *   (typed by the parameter's annotation), or bound to the slot's period (a preset
 *   such as "previous business day of the slot", one built from a base, a shift, a snap
 *   and a format, or a binding written as JSON — `./bindings`).
 */

import { BINDING_PRESETS, DEFAULT_BUILD, buildBinding, buildOf, type BindingBuild } from './bindings';

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type Block = { [key: string]: Json };

export interface ParameterSpec {
  name: string;
  /** The annotation's type name: str, int, float, bool, list, dict, date, any… */
  type: string;
  default: Json;
  help: string;
  /** The values it accepts (choices, bounds, a pattern), when it says. */
  allowed?: { choices: Json[] | null; min: number | null; max: number | null; pattern: string | null } | null;
}

export interface PreviewRow {
  slot_key: string;
  local: string;
  fire_at: string;
  status: string;
  reason: string | null;
  note?: string | null;
  /** With bindings asked for: what each resolves to for a run of this slot. */
  parameters?: { [name: string]: Json };
}

export type ScheduleKind = 'cron' | 'every' | 'manual';
export type ParameterMode = 'default' | 'value' | 'binding';

export interface ParameterInput {
  name: string;
  mode: ParameterMode;
  /** The literal, as typed (JSON for lists and dicts). */
  text: string;
  /** A preset's id, 'build' for {@link build}, or 'custom' for {@link bindingJson}. */
  binding: string;
  bindingJson: string;
  /** The builder's fields (binding 'build'). */
  build: BindingBuild;
}

export interface SubscriptionRow {
  channel: string;
  /** Recipients, separated by commas, semicolons or new lines. */
  recipients: string;
  /** Empty: every output format. */
  formats: string[];
  onlyIf: '' | 'results' | 'changed';
  /** The subscription's audience (scoped parameters, row filter), kept as written. */
  scope: Block | null;
}

export interface Advanced {
  dstGap: string;
  dstFold: string;
  misfire: string;
  grace: string;
  maxCatchup: string;
  overlap: string;
  stalenessAfter: string;
  stalenessAction: string;
  jitter: string;
}

export interface FormModel {
  name: string;
  kind: ScheduleKind;
  cron: string;
  every: string;
  timezone: string;
  parameters: ParameterInput[];
  outputs: string[];
  subscriptions: SubscriptionRow[];
  advanced: Advanced;
  message: string;
}

/** The choices of each advanced policy ('' is "server default"), with their labels. */
export const POLICY_CHOICES: { [K in keyof Advanced]?: [string, string][] } = {
  dstGap: [
    ['', 'default (auto: skip if at least hourly, else shift)'],
    ['shift', 'shift to the first instant after the gap'],
    ['skip', 'skip the slot (recorded SKIPPED dst_gap)']
  ],
  dstFold: [
    ['', 'default (auto: both if at least hourly, else first)'],
    ['first', 'first pass only'],
    ['last', 'second pass only'],
    ['both', 'both passes']
  ],
  misfire: [
    ['', 'default (run_latest)'],
    ['run_latest', 'run the newest missed slot only'],
    ['run_all', 'run every missed slot, up to max catch-up'],
    ['skip', 'record missed slots MISSED, run none']
  ],
  overlap: [
    ['', 'default (skip)'],
    ['skip', 'skip the new slot (SKIPPED overlap)'],
    ['allow', 'run both at once'],
    ['buffer_one', 'keep one waiting'],
    ['buffer_all', 'queue every slot'],
    ['replace', 'cancel the running one, run the new slot']
  ],
  stalenessAction: [
    ['', 'default (banner)'],
    ['banner', 'deliver with a "late" banner'],
    ['suppress', 'do not deliver (SUPPRESSED stale)']
  ]
};

export { BINDING_PRESETS };

const EMPTY_ADVANCED: Advanced = {
  dstGap: '',
  dstFold: '',
  misfire: '',
  grace: '',
  maxCatchup: '',
  overlap: '',
  stalenessAfter: '',
  stalenessAction: '',
  jitter: ''
};

/** Whether a form key is one of the Advanced section's (whose errors open it). */
export function isAdvanced(key: string): key is keyof Advanced {
  return Object.prototype.hasOwnProperty.call(EMPTY_ADVANCED, key);
}

const isObject = (value: unknown): value is Block =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** `block[key]` if the block has that key itself: a parameter may be named
 * `constructor` or `toString`, which every object inherits. */
export function own(block: Block, key: string): Json | undefined {
  return Object.prototype.hasOwnProperty.call(block, key) ? block[key] : undefined;
}

/** Set `block[key]` as the block's own key, even for `__proto__` (a valid Python
 * name), which plain assignment would take as the object's prototype. */
export function setOwn(block: Block, key: string, value: Json): void {
  Object.defineProperty(block, key, { value, enumerable: true, writable: true, configurable: true });
}

/** Canonical JSON (sorted keys), to compare two values. */
export function canonical(value: unknown): string {
  if (Array.isArray(value)) {
    return `[${value.map(canonical).join(',')}]`;
  }
  if (isObject(value)) {
    return `{${Object.keys(value)
      .sort()
      .map(k => `${JSON.stringify(k)}:${canonical(value[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/** Whether a parameter may be bound to the period: a binding resolves to text. */
export function bindable(spec: ParameterSpec): boolean {
  return spec.default === null || typeof spec.default === 'string';
}

/** The literal `value` as the form shows it for a parameter of type `type`. */
export function valueText(value: Json): string {
  return typeof value === 'string' ? value : JSON.stringify(value);
}

/** The literal a parameter's text stands for, or an error message. */
export function parseValue(spec: ParameterSpec, text: string): { value?: Json; error?: string } {
  const type = spec.type.toLowerCase();
  const trimmed = text.trim();
  if (type === 'int') {
    return /^[-+]?\d+$/.test(trimmed)
      ? { value: Number.parseInt(trimmed, 10) }
      : { error: `${spec.name} must be a whole number` };
  }
  if (type === 'float') {
    const n = Number(trimmed);
    return trimmed !== '' && Number.isFinite(n)
      ? { value: n }
      : { error: `${spec.name} must be a number` };
  }
  if (type === 'bool') {
    if (trimmed === 'true' || trimmed === 'True') {
      return { value: true };
    }
    if (trimmed === 'false' || trimmed === 'False') {
      return { value: false };
    }
    return { error: `${spec.name} must be true or false` };
  }
  if (type === 'str' || type === 'date' || type === 'datetime') {
    return { value: text };
  }
  // list, dict, any, or an annotation the form does not know: JSON, else text.
  try {
    return { value: JSON.parse(trimmed) as Json };
  } catch {
    if (type === 'list' || type === 'dict') {
      return { error: `${spec.name} must be a JSON ${type === 'list' ? 'list' : 'object'}` };
    }
    return { value: text };
  }
}

function parameterInput(spec: ParameterSpec, given: Json | undefined): ParameterInput {
  const input: ParameterInput = {
    name: spec.name,
    mode: 'default',
    text: valueText(spec.default),
    binding: BINDING_PRESETS[0].id,
    bindingJson: '',
    build: { ...DEFAULT_BUILD }
  };
  if (given === undefined) {
    return input;
  }
  if (isObject(given) && '$period' in given) {
    const preset = BINDING_PRESETS.find(p => canonical(p.value) === canonical(given));
    const build = preset ? null : buildOf(given);
    return {
      ...input,
      mode: 'binding',
      binding: preset ? preset.id : build ? 'build' : 'custom',
      bindingJson: JSON.stringify(given),
      build: build ?? input.build
    };
  }
  return { ...input, mode: 'value', text: valueText(given) };
}

const splitRecipients = (text: string): string[] =>
  text
    .split(/[,;\n]/)
    .map(r => r.trim())
    .filter(r => r.length > 0);

function subscriptionRows(list: Json | undefined): SubscriptionRow[] {
  const rows: SubscriptionRow[] = [];
  if (!Array.isArray(list)) {
    return rows;
  }
  for (const item of list) {
    if (!isObject(item)) {
      continue;
    }
    const formats = Array.isArray(item.formats) ? item.formats.map(String) : [];
    const onlyIf = item.only_if === 'results' || item.only_if === 'changed' ? item.only_if : '';
    const scope: Block = {};
    for (const key of ['parameters', 'row_filter']) {
      if (item[key] !== undefined) {
        scope[key] = item[key];
      }
    }
    const row: SubscriptionRow = {
      channel: String(item.channel ?? ''),
      recipients: String(item.to ?? ''),
      formats,
      onlyIf,
      scope: Object.keys(scope).length ? scope : null
    };
    const same = rows.find(
      r =>
        r.scope === null &&
        row.scope === null &&
        r.channel === row.channel &&
        r.onlyIf === row.onlyIf &&
        canonical(r.formats) === canonical(row.formats)
    );
    if (same) {
      same.recipients = `${same.recipients}, ${row.recipients}`;
    } else {
      rows.push(row);
    }
  }
  return rows;
}

const text = (value: Json | undefined): string =>
  value === undefined || value === null ? '' : String(value);

/** The form for a notebook whose block is `block` (null: none yet) and whose
 * parameters cell declares `schema`; `defaults` fill what the block does not say. */
export function blockToForm(
  block: Block | null,
  schema: ParameterSpec[],
  defaults: { name: string; timezone: string }
): FormModel {
  const b = block ?? {};
  const schedule = isObject(b.schedule) ? b.schedule : {};
  const dst = isObject(schedule.dst) ? schedule.dst : {};
  const misfire = isObject(schedule.misfire) ? schedule.misfire : {};
  const staleness = isObject(schedule.staleness) ? schedule.staleness : {};
  const values = isObject(b.parameters) ? b.parameters : {};
  const kind: ScheduleKind =
    schedule.cron !== undefined ? 'cron' : schedule.every !== undefined ? 'every' : block?.schedule ? 'cron' : block ? 'manual' : 'cron';
  return {
    name: typeof b.name === 'string' ? b.name : defaults.name,
    kind,
    cron: typeof schedule.cron === 'string' ? schedule.cron : kind === 'cron' ? '0 7 * * *' : '',
    every: text(schedule.every),
    timezone: typeof schedule.timezone === 'string' ? schedule.timezone : defaults.timezone,
    parameters: parameterInputs(schema, values),
    outputs: Array.isArray(b.outputs) ? b.outputs.map(String) : ['html'],
    subscriptions: subscriptionRows(b.subscriptions),
    advanced: {
      ...EMPTY_ADVANCED,
      dstGap: text(dst.gap),
      dstFold: text(dst.fold),
      misfire: text(misfire.policy),
      grace: text(misfire.grace),
      maxCatchup: text(misfire.max_catchup),
      overlap: text(schedule.overlap),
      stalenessAfter: text(staleness.after),
      stalenessAction: text(staleness.action),
      jitter: text(schedule.jitter)
    },
    message: ''
  };
}

/** What {@link formToBlock} made: the block, the form's own errors (keyed as
 * {@link fieldKey} keys them), and which form row each block subscription came from. */
export interface BlockResult {
  block: Block;
  errors: Record<string, string>;
  subscriptionRow: number[];
}

export function bindingValue(input: ParameterInput): { value?: Json; error?: string } {
  if (input.binding === 'build') {
    const built = buildBinding(input.build);
    return built.error ? { error: `${input.name}: ${built.error}` } : { value: built.value };
  }
  if (input.binding !== 'custom') {
    const preset = BINDING_PRESETS.find(p => p.id === input.binding);
    return preset ? { value: preset.value } : { error: `${input.name}: choose a binding` };
  }
  try {
    const value = JSON.parse(input.bindingJson) as Json;
    if (!isObject(value) || !('$period' in value)) {
      return { error: `${input.name}: a binding is a JSON object with "$period"` };
    }
    return { value };
  } catch {
    return { error: `${input.name}: the binding is not JSON` };
  }
}

/** The values of the parameters not left at their default (literals typed, bindings
 * as JSON), as a block's `parameters` or a manual run's; problems go into `errors`
 * under `parameter:<name>`. */
export function parameterValues(
  inputs: ParameterInput[],
  schema: ParameterSpec[],
  errors: Record<string, string>
): Block {
  const values: Block = {};
  for (const input of inputs) {
    const spec = schema.find(s => s.name === input.name);
    if (!spec || input.mode === 'default') {
      continue;
    }
    const parsed = input.mode === 'value' ? parseValue(spec, input.text) : bindingValue(input);
    if (parsed.error !== undefined) {
      errors[`parameter:${input.name}`] = parsed.error;
    } else if (parsed.value !== undefined) {
      setOwn(values, input.name, parsed.value);
    }
  }
  return values;
}

/** The inputs of a parameter form for `schema`, filled from `values`. */
export function parameterInputs(schema: ParameterSpec[], values: Block): ParameterInput[] {
  return schema.map(spec => parameterInput(spec, own(values, spec.name)));
}

/** The `nbcast` block the form stands for, keeping what `original` says beyond it. */
export function formToBlock(
  form: FormModel,
  schema: ParameterSpec[],
  original: Block | null
): BlockResult {
  const errors: Record<string, string> = {};
  const block: Block = { ...(original ?? {}) };
  const name = form.name.trim();
  if (name) {
    block.name = name;
  } else {
    delete block.name;
  }
  const before = isObject(block.schedule) ? block.schedule : {};
  if (form.kind === 'manual') {
    delete block.schedule;
  } else {
    const schedule: Block = {};
    if (form.kind === 'cron') {
      schedule.cron = form.cron.trim();
      if (!schedule.cron) {
        errors.cron = 'a cron expression is required (minute hour day month weekday)';
      }
    } else {
      schedule.every = form.every.trim();
      if (!schedule.every) {
        errors.every = 'an interval is required, e.g. 15m or 6h';
      }
    }
    schedule.timezone = form.timezone;
    for (const key of ['start', 'end']) {
      if (before[key] !== undefined) {
        schedule[key] = before[key];
      }
    }
    const a = form.advanced;
    const dst: Block = {};
    if (a.dstGap) dst.gap = a.dstGap;
    if (a.dstFold) dst.fold = a.dstFold;
    if (Object.keys(dst).length) schedule.dst = dst;
    const misfire: Block = {};
    if (a.misfire) misfire.policy = a.misfire;
    if (a.grace.trim()) misfire.grace = a.grace.trim();
    if (a.maxCatchup.trim()) {
      const n = Number(a.maxCatchup.trim());
      if (Number.isInteger(n)) {
        misfire.max_catchup = n;
      } else {
        errors.maxCatchup = 'max catch-up must be a whole number';
      }
    }
    if (Object.keys(misfire).length) schedule.misfire = misfire;
    if (a.overlap) schedule.overlap = a.overlap;
    const staleness: Block = {};
    if (a.stalenessAfter.trim()) staleness.after = a.stalenessAfter.trim();
    if (a.stalenessAction) staleness.action = a.stalenessAction;
    if (Object.keys(staleness).length) schedule.staleness = staleness;
    if (a.jitter.trim()) schedule.jitter = a.jitter.trim();
    block.schedule = schedule;
  }
  const parameters = parameterValues(form.parameters, schema, errors);
  if (Object.keys(parameters).length) {
    block.parameters = parameters;
  } else {
    delete block.parameters;
  }
  if (form.outputs.length === 0) {
    errors.outputs = 'choose at least one output format';
  }
  block.outputs = [...form.outputs];
  const subscriptions: Json[] = [];
  const subscriptionRow: number[] = [];
  form.subscriptions.forEach((row, index) => {
    const recipients = splitRecipients(row.recipients);
    if (recipients.length === 0) {
      errors[`subscription:${index}`] = 'add at least one recipient (or remove the row)';
    }
    for (const to of recipients) {
      const item: Block = { channel: row.channel, to };
      if (row.formats.length) item.formats = [...row.formats];
      if (row.onlyIf) item.only_if = row.onlyIf;
      if (row.scope) Object.assign(item, row.scope);
      subscriptions.push(item);
      subscriptionRow.push(index);
    }
  });
  if (subscriptions.length) {
    block.subscriptions = subscriptions;
  } else {
    delete block.subscriptions;
  }
  return { block, errors, subscriptionRow };
}

/** The form key a server error's dotted `field` is shown next to: `schedule.cron` →
 * `cron`, `subscriptions[3].to` → the form row that subscription came from,
 * `parameters.top_n` → that parameter's input. Unknown: `general`. */
export function fieldKey(
  field: string | null,
  result: Pick<BlockResult, 'subscriptionRow'>,
  parameterNames: string[]
): string {
  if (!field) {
    return 'general';
  }
  const direct: Record<string, string> = {
    name: 'name',
    path: 'general',
    schedule: 'cron',
    'schedule.cron': 'cron',
    'schedule.every': 'every',
    'schedule.timezone': 'timezone',
    'schedule.dst.gap': 'dstGap',
    'schedule.dst.fold': 'dstFold',
    'schedule.misfire.policy': 'misfire',
    'schedule.misfire.grace': 'grace',
    'schedule.misfire.max_catchup': 'maxCatchup',
    'schedule.overlap': 'overlap',
    'schedule.staleness.after': 'stalenessAfter',
    'schedule.staleness.action': 'stalenessAction',
    'schedule.jitter': 'jitter'
  };
  if (field in direct) {
    return direct[field];
  }
  if (field === 'outputs' || field.startsWith('outputs[')) {
    return 'outputs';
  }
  const sub = /^subscriptions\[(\d+)\]/.exec(field);
  if (sub) {
    const row = result.subscriptionRow[Number(sub[1])];
    return row === undefined ? 'subscriptions' : `subscription:${row}`;
  }
  if (field === 'subscriptions') {
    return 'subscriptions';
  }
  // A refused parameter value names its parameter in the field: `parameters.<name>`.
  const parameter = /^parameters\.([A-Za-z_][A-Za-z0-9_]*)/.exec(field);
  if (parameter) {
    return parameterNames.includes(parameter[1]) ? `parameter:${parameter[1]}` : 'parameters';
  }
  if (field === 'parameters') {
    return 'parameters';
  }
  return 'general';
}

/** The bindings of the parameters bound in the form (the valid ones), for the preview. */
export function formBindings(inputs: ParameterInput[]): Block {
  const out: Block = {};
  for (const input of inputs) {
    if (input.mode !== 'binding') continue;
    const found = bindingValue(input);
    if (found.value !== undefined) setOwn(out, input.name, found.value);
  }
  return out;
}
