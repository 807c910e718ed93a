/**
 * Small React pieces the dialog and the panel share: a field's error line, a state
 * badge, the parameter rows (default / a value / bound to the slot's period) and
 * instants shown in a zone.
 */
import * as React from 'react';

import type { UpcomingFire } from './api';
import { fireLine } from './form/preview';

import {
  BINDING_PRESETS,
  bindable,
  type ParameterInput,
  type ParameterMode,
  type ParameterSpec
} from './form/model';

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
                      {BINDING_PRESETS.map(p => (
                        <option key={p.id} value={p.id}>
                          {p.label}
                        </option>
                      ))}
                      <option value="custom">a binding written as JSON…</option>
                    </select>
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
