/**
 * Small React pieces the dialog and the panel share: a field's error line, a state
 * badge, the parameter rows (default / a value / bound to the slot's period) and
 * instants shown in a zone.
 */
import * as React from 'react';

import type { UpcomingFire } from './api';
import { fireLine } from './form/preview';

import { BUILD_BASES, BUILD_FORMATS, BUILD_SNAPS, BUILD_UNITS, buildBinding } from './form/bindings';
import {
  BINDING_PRESETS,
  bindable,
  type ParameterInput,
  type ParameterMode,
  type ParameterSpec
} from './form/model';

const PRESET_GROUPS = [...new Set(BINDING_PRESETS.map(p => p.group))];

/** A parameter's rule for people: "one of EMEA, AMER" / "1 to 50" / "matches …". */
export function ruleText(spec: ParameterSpec): string {
  const a = spec.allowed;
  if (!a) return '';
  const parts: string[] = [];
  if (a.choices) parts.push(`one of ${a.choices.map(c => (typeof c === 'string' ? c : JSON.stringify(c))).join(', ')}`);
  if (a.min !== null || a.max !== null) parts.push(`${a.min ?? '…'} to ${a.max ?? '…'}`);
  if (a.pattern) parts.push(`matches ${a.pattern}`);
  return parts.join('; ');
}

export function FieldError(props: { error?: string; testid?: string }): JSX.Element | null {
  if (!props.error) {
    return null;
  }
  return (
    <div className="nbcast-FieldError" role="alert" data-error-for={props.testid}>
      {props.error}
    </div>
  );
}

/** A labelled form field, with its error under it (`errorKey`: what the error line
 * is tagged with, for the tests and for screen readers' alerts). */
export function Field(props: {
  label: string;
  error?: string;
  errorKey?: string;
  children: React.ReactNode;
}): JSX.Element {
  return (
    <label className="nbcast-Field">
      <span>{props.label}</span>
      {props.children}
      <FieldError error={props.error} testid={props.errorKey} />
    </label>
  );
}

/** A run's, a delivery's or a rendition's state as a coloured badge. */
export function StateBadge(props: { state: string | null | undefined; reason?: string | null }): JSX.Element {
  const state = props.state ?? 'none';
  return (
    <span className={`nbcast-State nbcast-State-${state}`} title={props.reason ?? undefined}>
      {state}
      {props.reason ? <span className="nbcast-Reason"> · {props.reason}</span> : null}
    </span>
  );
}

const FORMATTERS = new Map<string, Intl.DateTimeFormat>();

/** One formatter per zone (making one costs more than formatting with it). */
function formatter(zone: string | undefined): Intl.DateTimeFormat {
  const key = zone ?? '';
  let found = FORMATTERS.get(key);
  if (!found) {
    found = new Intl.DateTimeFormat('en-CA', {
      timeZone: zone,
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      hour: '2-digit',
      minute: '2-digit',
      hourCycle: 'h23',
      timeZoneName: 'short'
    });
    FORMATTERS.set(key, found);
  }
  return found;
}

/** An instant (ISO, UTC) as wall time in `zone` ("2026-12-02 07:00 EST"). */
export function inZone(iso: string | null | undefined, zone?: string): string {
  if (!iso) {
    return '—';
  }
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) {
    return iso;
  }
  try {
    const parts = formatter(zone).formatToParts(date);
    const get = (type: string) => parts.find(p => p.type === type)?.value ?? '';
    return `${get('year')}-${get('month')}-${get('day')} ${get('hour')}:${get('minute')} ${get('timeZoneName')}`;
  } catch {
    return iso;
  }
}

const MODES: [ParameterMode, string][] = [
  ['default', "notebook's default"],
  ['value', 'a value'],
  ['binding', "the slot's period"]
];

/** The parameter form drawn from the schema: one row per parameter, with its type,
 * default and help text (the comment beside it in the parameters cell). */
export function ParameterRows(props: {
  schema: ParameterSpec[];
  inputs: ParameterInput[];
  errors: Record<string, string>;
  onChange: (index: number, change: Partial<ParameterInput>) => void;
  /** What each bound parameter resolves to in the next slots (the schedule's preview). */
  resolved?: Record<string, string[]>;
}): JSX.Element {
  if (props.schema.length === 0) {
    return (
      <p className="nbcast-Hint">
        This notebook has no cell tagged <code>parameters</code>: it takes no parameters.
      </p>
    );
  }
  return (
    <table className="nbcast-Parameters">
      <tbody>
        {props.inputs.map((input, index) => {
          const spec = props.schema.find(s => s.name === input.name);
          if (!spec) {
            return null;
          }
          const error = props.errors[`parameter:${input.name}`];
          return (
            <tr key={input.name} data-parameter={input.name}>
              <td className="nbcast-ParamName">
                <code>{input.name}</code>
                <span className="nbcast-ParamType">{spec.type}</span>
                {spec.help ? <div className="nbcast-Hint">{spec.help}</div> : null}
                {spec.allowed ? (
                  <div className="nbcast-Hint nbcast-Rule" data-rule={input.name}>
                    {ruleText(spec)}
                  </div>
                ) : null}
              </td>
              <td>
                <select
                  aria-label={`${input.name} source`}
                  value={input.mode}
                  onChange={e => props.onChange(index, { mode: e.target.value as ParameterMode })}
                >
                  {MODES.filter(([mode]) => mode !== 'binding' || bindable(spec)).map(([mode, label]) => (
                    <option key={mode} value={mode}>
                      {label}
                    </option>
                  ))}
                </select>
              </td>
              <td className="nbcast-ParamValue">
                {input.mode === 'default' ? (
                  <code className="nbcast-Default">{JSON.stringify(spec.default)}</code>
                ) : input.mode === 'value' ? (
                  spec.type === 'bool' ? (
                    <select
                      aria-label={`${input.name} value`}
                      value={input.text}
                      onChange={e => props.onChange(index, { text: e.target.value })}
                    >
                      <option value="true">true</option>
                      <option value="false">false</option>
                    </select>
                  ) : spec.allowed?.choices ? (
                    <select
                      aria-label={`${input.name} value`}
                      value={input.text}
                      onChange={e => props.onChange(index, { text: e.target.value })}
                    >
                      {spec.allowed.choices.some(c => String(c) === input.text) ? null : (
                        <option value={input.text}>{input.text || '(choose)'}</option>
                      )}
                      {spec.allowed.choices.map(c => (
                        <option key={String(c)} value={String(c)}>
                          {String(c)}
                        </option>
                      ))}
                    </select>
                  ) : (
                    <input
                      aria-label={`${input.name} value`}
                      value={input.text}
                      onChange={e => props.onChange(index, { text: e.target.value })}
                    />
                  )
                ) : (
                  <>
                    <select
                      aria-label={`${input.name} binding`}
                      value={input.binding}
                      onChange={e => props.onChange(index, { binding: e.target.value })}
                    >
                      {PRESET_GROUPS.map(group => (
                        <optgroup key={group} label={group}>
                          {BINDING_PRESETS.filter(p => p.group === group).map(p => (
                            <option key={p.id} value={p.id}>
                              {p.label}
                            </option>
                          ))}
                        </optgroup>
                      ))}
                      <optgroup label="Other">
                        <option value="build">build one: base, shift, snap, format…</option>
                        <option value="custom">a binding written as JSON…</option>
                      </optgroup>
                    </select>
                    {input.binding === 'build' ? (
                      <BindingBuilder
                        name={input.name}
                        input={input}
                        onChange={build => props.onChange(index, { build })}
                      />
                    ) : null}
                    {input.binding === 'custom' ? (
                      <textarea
                        aria-label={`${input.name} binding JSON`}
                        rows={2}
                        placeholder='{"$period": "slot", "steps": [{"days": -1}], "format": "date"}'
                        value={input.bindingJson}
                        onChange={e => props.onChange(index, { bindingJson: e.target.value })}
                      />
                    ) : null}
                  </>
                )}
                {input.mode === 'binding' && props.resolved?.[input.name]?.length ? (
                  <div className="nbcast-Hint nbcast-Resolved" data-resolved={input.name}>
                    next slots: {props.resolved[input.name].join(' · ')}
                  </div>
                ) : null}
                <FieldError error={error} testid={`parameter:${input.name}`} />
              </td>
            </tr>
          );
        })}
      </tbody>
    </table>
  );
}

/** A coming fire as the dialog shows it: the wall time and offset in the report's zone. */
export function NextFire(props: { fire: UpcomingFire }): JSX.Element {
  const line = fireLine(props.fire);
  return (
    <span className="nbcast-NextFire">
      {line.when} <span className="nbcast-Offset">{line.offset}</span>
      {line.skipped ? <span className="nbcast-Reason"> skipped</span> : null}
    </span>
  );
}

/** The binding builder: from a base, shift by a number of units, snap, format. */
function BindingBuilder(props: {
  name: string;
  input: ParameterInput;
  onChange: (build: ParameterInput['build']) => void;
}): JSX.Element {
  const b = props.input.build;
  const set = (change: Partial<ParameterInput['build']>) => props.onChange({ ...b, ...change });
  const built = buildBinding(b);
  return (
    <div className="nbcast-BindingBuilder">
      <select aria-label={`${props.name} base`} value={b.base} onChange={e => set({ base: e.target.value as any })}>
        {BUILD_BASES.map(([v, label]) => (
          <option key={v} value={v}>
            {label}
          </option>
        ))}
      </select>
      <input
        aria-label={`${props.name} shift`}
        className="nbcast-Shift"
        value={b.amount}
        onChange={e => set({ amount: e.target.value })}
      />
      <select aria-label={`${props.name} unit`} value={b.unit} onChange={e => set({ unit: e.target.value as any })}>
        {BUILD_UNITS.map(([v, label]) => (
          <option key={v} value={v}>
            {label}
          </option>
        ))}
      </select>
      <select aria-label={`${props.name} snap`} value={b.snap} onChange={e => set({ snap: e.target.value })}>
        {BUILD_SNAPS.map(([v, label]) => (
          <option key={v} value={v}>
            {label}
          </option>
        ))}
      </select>
      <select aria-label={`${props.name} format`} value={b.format} onChange={e => set({ format: e.target.value })}>
        {BUILD_FORMATS.map(([v, label]) => (
          <option key={v} value={v}>
            {label}
          </option>
        ))}
      </select>
      <code className="nbcast-Hint" data-binding-json={props.name}>
        {built.value ? JSON.stringify(built.value) : built.error}
      </code>
    </div>
  );
}
