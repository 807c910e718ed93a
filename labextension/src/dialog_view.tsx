/**
 * The "Schedule as report…" form as React renders it from the dialog's model (a
 * {@link FormHost}: `ScheduleBody` in `dialog.tsx`): name, schedule with its
 * description and next fires, the parameter form, outputs, subscriptions, the advanced
 * policies, and each field's error (the form's own, or the server's for the field it
 * names).
 */
import * as React from 'react';

import type { NotebookCheck } from './api';
import { Field, FieldError, ParameterRows } from './components';
import {
  POLICY_CHOICES,
  type Advanced,
  type FormModel,
  type ParameterInput,
  type ParameterSpec,
  type SubscriptionRow
} from './form/model';
import { describeSchedule, type FireLine } from './form/preview';

/** What the form view reads and changes: the dialog's model. */
/** The schedule preview the dialog shows: fire lines, DST notes ahead, and what each
 * bound parameter resolves to in the next slots (`of`: the schedule it is of). */
export interface PreviewState {
  next: FireLine[];
  ahead: FireLine[];
  error: string | null;
  loading: boolean;
  of: string;
  resolved: Record<string, string[]>;
}

export interface FormHost {
  readonly access: { readonly path: string };
  readonly form: FormModel;
  readonly check: NotebookCheck | null;
  readonly errors: Record<string, string>;
  readonly preview: PreviewState;
  readonly busy: boolean;
  readonly schema: ParameterSpec[];
  openAdvanced: boolean;
  /** Apply `mutate` to the form and draw again (`refresh`: the preview too). */
  change(mutate: (form: FormModel) => void, refresh?: boolean): void;
}

function Published(props: { check: NotebookCheck | null; path: string }): JSX.Element {
  const p = props.check?.published;
  if (!p) {
    return (
      <p className="nbcast-Status" data-published="no">
        Not published yet: saving publishes version 1.
      </p>
    );
  }
  const bound = p.this_file;
  return (
    <p className="nbcast-Status" data-published={p.latest_version}>
      Published as <strong>{p.name}</strong>, version <strong>{p.latest_version}</strong>
      {p.paused ? ' (paused)' : ''}
      {p.same ? ' — this notebook is that version.' : ' — saving publishes a new version.'}
      {bound ? null : <span className="nbcast-Hint"> That name is bound to {p.source_path}.</span>}
    </p>
  );
}

function Fires(props: { lines: FireLine[] }): JSX.Element {
  return (
    <ul className="nbcast-Fires">
      {props.lines.map((line, i) => (
        <li key={i} className={line.skipped ? 'nbcast-Skipped' : undefined}>
          <span className="nbcast-When">{line.when}</span> <span className="nbcast-Offset">{line.offset}</span>
          {line.skipped ? <span className="nbcast-Reason"> skipped</span> : null}
          {line.note ? <div className="nbcast-DstNote">{line.note}</div> : null}
        </li>
      ))}
    </ul>
  );
}

function Select(props: {
  label: string;
  name: keyof Advanced;
  body: FormHost;
}): JSX.Element {
  const { body, name } = props;
  return (
    <Field label={props.label} error={body.errors[name]} errorKey={name}>
      <select
        aria-label={props.label}
        value={body.form.advanced[name]}
        onChange={e => body.change(f => (f.advanced[name] = e.target.value), name === 'dstGap' || name === 'dstFold')}
      >
        {(POLICY_CHOICES[name] ?? []).map(([value, label]) => (
          <option key={value} value={value}>
            {label}
          </option>
        ))}
      </select>
    </Field>
  );
}

function Text(props: { label: string; name: keyof Advanced; body: FormHost; placeholder: string }): JSX.Element {
  const { body, name } = props;
  return (
    <Field label={props.label} error={body.errors[name]} errorKey={name}>
      <input
        aria-label={props.label}
        placeholder={props.placeholder}
        value={body.form.advanced[name]}
        onChange={e => body.change(f => (f.advanced[name] = e.target.value))}
      />
    </Field>
  );
}

function SubscriptionRows(props: { body: FormHost }): JSX.Element {
  const { body } = props;
  const channels = body.check?.channels ?? ['email'];
  const unconfigured = body.check?.unconfigured ?? {};
  const update = (i: number, change: Partial<SubscriptionRow>) =>
    body.change(f => (f.subscriptions[i] = { ...f.subscriptions[i], ...change }));
  return (
    <div className="nbcast-Subscriptions">
      {body.form.subscriptions.map((row, i) => (
        <div className="nbcast-Subscription" key={i} data-subscription={i}>
          <select aria-label="channel" value={row.channel} onChange={e => update(i, { channel: e.target.value })}>
            {[...new Set([...channels, row.channel])].map(c => (
              <option key={c} value={c} data-unconfigured={c in unconfigured ? 'true' : undefined}>
                {c in unconfigured ? `${c} (not configured)` : c}
              </option>
            ))}
          </select>
          {row.channel in unconfigured ? (
            <span className="nbcast-Hint nbcast-Warning" data-unconfigured-hint={i}>
              not configured here (set {unconfigured[row.channel]}): deliveries fail until it is
            </span>
          ) : null}
          <input
            aria-label="recipients"
            className="nbcast-Recipients"
            placeholder={row.channel === 'slack' ? '#channel' : row.channel === 'webhook' ? 'https://…' : 'name@example.com, …'}
            value={row.recipients}
            onChange={e => update(i, { recipients: e.target.value })}
          />
          <span className="nbcast-Formats">
            {body.form.outputs.map(fmt => (
              <label key={fmt}>
                <input
                  type="checkbox"
                  checked={row.formats.length === 0 || row.formats.includes(fmt)}
                  onChange={e => {
                    const all = row.formats.length === 0 ? [...body.form.outputs] : [...row.formats];
                    const next = e.target.checked ? [...all, fmt] : all.filter(x => x !== fmt);
                    const same = body.form.outputs.every(o => next.includes(o));
                    update(i, { formats: same ? [] : body.form.outputs.filter(o => next.includes(o)) });
                  }}
                />
                {fmt}
              </label>
            ))}
          </span>
          <select
            aria-label="only if"
            value={row.onlyIf}
            onChange={e => update(i, { onlyIf: e.target.value as SubscriptionRow['onlyIf'] })}
          >
            <option value="">always</option>
            <option value="results">only if it has results</option>
            <option value="changed">only if it changed</option>
          </select>
          <button
            className="jp-mod-styled nbcast-Remove"
            title="Remove this subscription"
            onClick={() => body.change(f => f.subscriptions.splice(i, 1))}
          >
            ✕
          </button>
          {row.scope ? (
            <div className="nbcast-Hint">Audience (kept as written): {JSON.stringify(row.scope)}</div>
          ) : null}
          <FieldError error={body.errors[`subscription:${i}`]} testid={`subscription:${i}`} />
        </div>
      ))}
      <button
        className="jp-mod-styled nbcast-Add"
        onClick={() =>
          body.change(f =>
            f.subscriptions.push({ channel: channels[0] ?? 'email', recipients: '', formats: [], onlyIf: '', scope: null })
          )
        }
      >
        + Add subscription
      </button>
      <FieldError error={body.errors.subscriptions} testid="subscriptions" />
    </div>
  );
}

export function ScheduleFormView(props: { body: FormHost }): JSX.Element {
  const { body } = props;
  const f = body.form;
  const described = describeSchedule(f.kind, f.cron, f.every, f.timezone);
  const formats = body.check?.formats ?? ['html'];
  return (
    <div className="nbcast-Form" data-busy={body.busy ? 'yes' : 'no'}>
      <div className="nbcast-Path">{body.access.path}</div>
      <Published check={body.check} path={body.access.path} />
      <FieldError error={body.errors.general} testid="general" />
      <Field label="Name" error={body.errors.name} errorKey="name">
        <input aria-label="Name" value={f.name} onChange={e => body.change(m => (m.name = e.target.value))} />
      </Field>

      <fieldset className="nbcast-Section">
        <legend>Schedule</legend>
        <div className="nbcast-Kinds" role="radiogroup">
          {(
            [
              ['cron', 'Cron'],
              ['every', 'Interval'],
              ['manual', 'On request only']
            ] as const
          ).map(([kind, label]) => (
            <label key={kind}>
              <input
                type="radio"
                name="nbcast-kind"
                value={kind}
                checked={f.kind === kind}
                onChange={() => body.change(m => (m.kind = kind), true)}
              />
              {label}
            </label>
          ))}
        </div>
        {f.kind === 'cron' ? (
          <Field label="Cron" error={body.errors.cron} errorKey="cron">
            <input
              aria-label="Cron"
              className="nbcast-Mono"
              placeholder="minute hour day month weekday"
              value={f.cron}
              onChange={e => body.change(m => (m.cron = e.target.value), true)}
            />
          </Field>
        ) : null}
        {f.kind === 'every' ? (
          <Field label="Every" error={body.errors.every} errorKey="every">
            <input
              aria-label="Every"
              className="nbcast-Mono"
              placeholder="15m, 6h, 1d"
              value={f.every}
              onChange={e => body.change(m => (m.every = e.target.value), true)}
            />
          </Field>
        ) : null}
        {f.kind !== 'manual' ? (
          <Field label="Time zone" error={body.errors.timezone} errorKey="timezone">
            <input
              aria-label="Time zone"
              list="nbcast-zones"
              value={f.timezone}
              onChange={e => body.change(m => (m.timezone = e.target.value), true)}
            />
            <datalist id="nbcast-zones">
              {(body.check?.zones ?? []).map(z => (
                <option key={z} value={z} />
              ))}
            </datalist>
          </Field>
        ) : null}
        <p className={described.ok ? 'nbcast-Describe' : 'nbcast-Describe nbcast-Bad'} data-testid="describe">
          {described.text}
        </p>
        {f.kind !== 'manual' ? (
          <div
            className="nbcast-Preview"
            data-loading={body.preview.loading ? 'yes' : 'no'}
            data-of={body.preview.loading ? '' : body.preview.of}
          >
            {body.preview.error ? <FieldError error={body.preview.error} testid="preview" /> : null}
            {body.preview.next.length ? (
              <>
                <div className="nbcast-Caption">Next fire times ({f.timezone})</div>
                <Fires lines={body.preview.next} />
              </>
            ) : null}
            {body.preview.ahead.length ? (
              <>
                <div className="nbcast-Caption">DST changes ahead</div>
                <Fires lines={body.preview.ahead} />
              </>
            ) : null}
          </div>
        ) : null}
      </fieldset>

      <fieldset className="nbcast-Section">
        <legend>Parameters</legend>
        <ParameterRows
          schema={body.schema}
          inputs={f.parameters}
          errors={body.errors}
          resolved={body.preview.resolved}
          onChange={(i: number, change: Partial<ParameterInput>) =>
            body.change(m => (m.parameters[i] = { ...m.parameters[i], ...change }), true)
          }
        />
        <FieldError error={body.errors.parameters} testid="parameters" />
      </fieldset>

      <fieldset className="nbcast-Section">
        <legend>Outputs</legend>
        <div className="nbcast-Outputs">
          {formats.map(fmt => (
            <label key={fmt}>
              <input
                type="checkbox"
                aria-label={`output ${fmt}`}
                checked={f.outputs.includes(fmt)}
                onChange={e =>
                  body.change(m => {
                    m.outputs = e.target.checked
                      ? formats.filter(x => x === fmt || m.outputs.includes(x))
                      : m.outputs.filter(x => x !== fmt);
                    for (const s of m.subscriptions) s.formats = s.formats.filter(x => m.outputs.includes(x));
                  })
                }
              />
              {fmt}
            </label>
          ))}
        </div>
        <FieldError error={body.errors.outputs} testid="outputs" />
      </fieldset>

      <fieldset className="nbcast-Section">
        <legend>Subscriptions</legend>
        <SubscriptionRows body={body} />
      </fieldset>

      <details
        className="nbcast-Section nbcast-Advanced"
        open={body.openAdvanced}
        onToggle={e => (body.openAdvanced = (e.target as HTMLDetailsElement).open)}
      >
        <summary>Advanced: misfire, overlap, DST and staleness</summary>
        <Select label="DST gap (a wall time that does not exist)" name="dstGap" body={body} />
        <Select label="DST fold (a wall time that happens twice)" name="dstFold" body={body} />
        <Select label="Misfire (slots found late)" name="misfire" body={body} />
        <Text label="Misfire grace" name="grace" body={body} placeholder="default 10m" />
        <Text label="Max catch-up" name="maxCatchup" body={body} placeholder="default 100" />
        <Select label="Overlap (a slot due while a run is active)" name="overlap" body={body} />
        <Text label="Stale after" name="stalenessAfter" body={body} placeholder="e.g. 2h (default: never)" />
        <Select label="When stale" name="stalenessAction" body={body} />
        <Text label="Jitter" name="jitter" body={body} placeholder="e.g. 30s (default 0)" />
      </details>

      <Field label="What changed">
        <input
          aria-label="What changed"
          placeholder="a note for this version (optional)"
          value={f.message}
          onChange={e => body.change(m => (m.message = e.target.value))}
        />
      </Field>
    </div>
  );
}
