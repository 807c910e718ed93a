/**
 * "Schedule as report…": the dialog that turns a notebook into a scheduled report.
 *
 * It opens on the notebook's own `nbcast` block (or sensible defaults: a daily cron at
 * 07:00 in the browser's zone, HTML out), asks the server what the notebook declares
 * (`POST /notebooks/check`: the parameter schema, the published definition of that
 * name and its version) and, while the user types, shows the schedule in words and its
 * next fire times with DST notes from `GET /schedule/preview`.
 *
 * "Save and publish" checks the form locally, then the whole block on the server (as
 * publishing would: a refusal is shown next to the field it names and nothing is
 * written), then writes the block into the notebook's metadata and saves the notebook
 * (through its open editor when it is open, so unsaved edits are not lost or
 * overwritten; through the contents API otherwise), then publishes the saved file
 * (`POST /definitions {path}`). The dialog stays open on any refusal.
 */
import { Dialog, Notification } from '@jupyterlab/apputils';
import type { Contents } from '@jupyterlab/services';
import { ReactWidget } from '@jupyterlab/ui-components';
import * as React from 'react';

import { ApiError, api, type NotebookCheck } from './api';
import { FieldError, ParameterRows } from './components';
import {
  POLICY_CHOICES,
  blockToForm,
  fieldKey,
  formToBlock,
  type Advanced,
  type Block,
  type FormModel,
  type ParameterInput,
  type SubscriptionRow
} from './form/model';
import {
  browserZone,
  describeSchedule,
  previewLines,
  previewQuery,
  previewRanges,
  type FireLine
} from './form/preview';

/** Reading and writing the notebook the dialog is about. */
export interface NotebookAccess {
  path: string;
  /** The notebook's JSON as the user sees it (the open editor's, else the file's). */
  read(): Promise<any>;
  /** Write `block` as the notebook's `nbcast` metadata and save the notebook. */
  writeBlock(block: Block): Promise<void>;
}

/** The notebook file's JSON exactly as publishing reads it (the text, parsed here:
 * the contents API's notebook model is nbformat's rewrite of it, which need not hash
 * the same as the file). */
export async function readFile(contents: Contents.IManager, path: string): Promise<any> {
  const model = await contents.get(path, { type: 'file', format: 'text', content: true });
  return JSON.parse(model.content as string);
}

/** A notebook only on disk: read and written through the contents API. */
export function fileAccess(contents: Contents.IManager, path: string): NotebookAccess {
  return {
    path,
    read: () => readFile(contents, path),
    async writeBlock(block: Block) {
      const model = await contents.get(path, { type: 'notebook', content: true });
      const content = model.content;
      content.metadata = { ...(content.metadata ?? {}), nbcast: block };
      await contents.save(path, { type: 'notebook', format: 'json', content });
    }
  };
}

const DEBOUNCE_MS = 350;

/** The notebook as the check needs it: outputs and counts are not part of a version
 * (publishing strips them too), and a large plot would only cost the request. */
export function withoutOutputs(notebook: any): any {
  if (!notebook || !Array.isArray(notebook.cells)) return notebook;
  return {
    ...notebook,
    cells: notebook.cells.map((cell: any) =>
      cell && cell.cell_type === 'code' ? { ...cell, outputs: [], execution_count: null } : cell
    )
  };
}

function stem(path: string): string {
  const file = path.split('/').pop() ?? 'report';
  const base = file.replace(/\.ipynb$/i, '').replace(/[^A-Za-z0-9._-]+/g, '-').replace(/^[-._]+|[-._]+$/g, '');
  return base || 'report';
}

/** The dialog's body: the form's model lives here and React renders it. */
export class ScheduleBody extends ReactWidget {
  form: FormModel;
  original: Block | null;
  check: NotebookCheck | null = null;
  errors: Record<string, string> = {};
  preview: { next: FireLine[]; ahead: FireLine[]; error: string | null; loading: boolean; of: string } = {
    next: [],
    ahead: [],
    error: null,
    loading: false,
    of: ''
  };
  busy = false;
  /** The definition's name once published. */
  published: string | null = null;
  private _timer = 0;
  private _generation = 0;

  constructor(
    readonly access: NotebookAccess,
    notebook: any,
    check: NotebookCheck
  ) {
    super();
    this.addClass('nbcast-ScheduleDialog');
    const block = notebook?.metadata?.nbcast;
    this.original = block && typeof block === 'object' && !Array.isArray(block) ? block : null;
    this.check = check;
    // The browser's zone as a schedule may name it (an alias such as Asia/Calcutta is
    // answered as Asia/Kolkata by the server), else UTC.
    this.form = blockToForm(this.original, check.parameters, {
      name: check.name ?? stem(access.path),
      timezone: check.timezone ?? 'UTC'
    });
    if (check.problem && this.original) {
      this.showProblem(check.problem.field, check.problem.message);
    }
    this.schedulePreview(0);
  }

  get schema() {
    return this.check?.parameters ?? [];
  }

  change(mutate: (form: FormModel) => void, refresh = false): void {
    mutate(this.form);
    // What was refused is judged again on the next save; an edit clears the old verdict.
    this.errors = {};
    if (refresh) {
      this.schedulePreview(DEBOUNCE_MS);
    }
    this.update();
  }

  private showProblem(field: string | null, message: string): void {
    const result = formToBlock(this.form, this.schema, this.original);
    const key = fieldKey(
      field,
      message,
      result,
      this.schema.map(s => s.name)
    );
    this.errors = { [key]: field && key === 'general' ? `${field}: ${message}` : message };
    if (key in ADVANCED_KEYS) {
      this.openAdvanced = true;
    }
  }

  openAdvanced = false;

  /** Ask the preview for the schedule as it is now (debounced). */
  schedulePreview(delay: number): void {
    window.clearTimeout(this._timer);
    this._timer = window.setTimeout(() => void this.runPreview(), delay);
  }

  private async runPreview(): Promise<void> {
    const generation = ++this._generation;
    const f = this.form;
    // What the preview shows is of this schedule (the UI tests wait for it).
    const of = [f.kind, f.cron, f.every, f.timezone, f.advanced.dstGap, f.advanced.dstFold].join('|');
    const ranges = previewRanges(new Date());
    if (previewQuery(f.kind, f.cron, f.every, f.timezone, f.advanced.dstGap, f.advanced.dstFold, ranges[0]) === null) {
      this.preview = { next: [], ahead: [], error: null, loading: false, of };
      this.update();
      return;
    }
    this.preview = { ...this.preview, loading: true };
    this.update();
    let error: string | null = null;
    for (const range of ranges) {
      const query = previewQuery(f.kind, f.cron, f.every, f.timezone, f.advanced.dstGap, f.advanced.dstFold, range)!;
      try {
        const rows = await api.preview(query);
        if (generation !== this._generation) return;
        this.preview = { ...previewLines(rows), error: null, loading: false, of };
        this.update();
        return;
      } catch (e) {
        error = e instanceof Error ? e.message : String(e);
        if (!(e instanceof ApiError) || !/more than/.test(error)) {
          break;
        }
      }
    }
    if (generation !== this._generation) return;
    this.preview = { next: [], ahead: [], error, loading: false, of };
    this.update();
  }

  /** Check, write and publish (module docstring); true once published. */
  async save(): Promise<boolean> {
    if (this.busy) return false;
    let result: ReturnType<typeof formToBlock>;
    try {
      result = formToBlock(this.form, this.schema, this.original);
    } catch (e) {
      this.errors = { general: e instanceof Error ? e.message : String(e) };
      this.update();
      return false;
    }
    this.errors = { ...result.errors };
    if (Object.keys(result.errors).length) {
      if (Object.keys(result.errors).some(k => k in ADVANCED_KEYS)) this.openAdvanced = true;
      this.update();
      return false;
    }
    this.busy = true;
    this.update();
    try {
      const notebook = withoutOutputs(await this.access.read());
      const candidate = { ...notebook, metadata: { ...(notebook.metadata ?? {}), nbcast: result.block } };
      const check = await api.check(candidate, this.access.path);
      if (check.problem) {
        this.showProblem(check.problem.field, check.problem.message);
        return false;
      }
      await this.access.writeBlock(result.block);
      this.original = result.block;
      const published = await api.publish(this.access.path, this.form.message.trim());
      const v = published.version.version;
      const name = published.definition.name;
      this.published = name;
      Notification.success(
        published.created
          ? `Published ${name} version ${v}${published.warnings.length ? ` (${published.warnings.join('; ')})` : ''}`
          : `${name} is unchanged: still version ${v}`,
        { autoClose: 5000 }
      );
      return true;
    } catch (e) {
      if (e instanceof ApiError) {
        this.showProblem(e.field, e.message);
      } else {
        this.errors = { general: e instanceof Error ? e.message : String(e) };
      }
      return false;
    } finally {
      this.busy = false;
      this.update();
    }
  }

  dispose(): void {
    window.clearTimeout(this._timer);
    super.dispose();
  }

  render(): JSX.Element {
    return <ScheduleFormView body={this} />;
  }
}

const ADVANCED_KEYS: Record<string, true> = {
  dstGap: true,
  dstFold: true,
  misfire: true,
  grace: true,
  maxCatchup: true,
  overlap: true,
  stalenessAfter: true,
  stalenessAction: true,
  jitter: true
};


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
  body: ScheduleBody;
}): JSX.Element {
  const { body, name } = props;
  return (
    <label className="nbcast-Field">
      <span>{props.label}</span>
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
      <FieldError error={body.errors[name]} testid={name} />
    </label>
  );
}

function Text(props: { label: string; name: keyof Advanced; body: ScheduleBody; placeholder: string }): JSX.Element {
  const { body, name } = props;
  return (
    <label className="nbcast-Field">
      <span>{props.label}</span>
      <input
        aria-label={props.label}
        placeholder={props.placeholder}
        value={body.form.advanced[name]}
        onChange={e => body.change(f => (f.advanced[name] = e.target.value))}
      />
      <FieldError error={body.errors[name]} testid={name} />
    </label>
  );
}

function SubscriptionRows(props: { body: ScheduleBody }): JSX.Element {
  const { body } = props;
  const channels = body.check?.channels ?? ['email'];
  const update = (i: number, change: Partial<SubscriptionRow>) =>
    body.change(f => (f.subscriptions[i] = { ...f.subscriptions[i], ...change }));
  return (
    <div className="nbcast-Subscriptions">
      {body.form.subscriptions.map((row, i) => (
        <div className="nbcast-Subscription" key={i} data-subscription={i}>
          <select aria-label="channel" value={row.channel} onChange={e => update(i, { channel: e.target.value })}>
            {[...new Set([...channels, row.channel])].map(c => (
              <option key={c} value={c}>
                {c}
              </option>
            ))}
          </select>
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

function ScheduleFormView(props: { body: ScheduleBody }): JSX.Element {
  const { body } = props;
  const f = body.form;
  const described = describeSchedule(f.kind, f.cron, f.every, f.timezone);
  const formats = body.check?.formats ?? ['html'];
  return (
    <div className="nbcast-Form" data-busy={body.busy ? 'yes' : 'no'}>
      <div className="nbcast-Path">{body.access.path}</div>
      <Published check={body.check} path={body.access.path} />
      <FieldError error={body.errors.general} testid="general" />
      <label className="nbcast-Field">
        <span>Name</span>
        <input aria-label="Name" value={f.name} onChange={e => body.change(m => (m.name = e.target.value))} />
        <FieldError error={body.errors.name} testid="name" />
      </label>

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
          <label className="nbcast-Field">
            <span>Cron</span>
            <input
              aria-label="Cron"
              className="nbcast-Mono"
              placeholder="minute hour day month weekday"
              value={f.cron}
              onChange={e => body.change(m => (m.cron = e.target.value), true)}
            />
            <FieldError error={body.errors.cron} testid="cron" />
          </label>
        ) : null}
        {f.kind === 'every' ? (
          <label className="nbcast-Field">
            <span>Every</span>
            <input
              aria-label="Every"
              className="nbcast-Mono"
              placeholder="15m, 6h, 1d"
              value={f.every}
              onChange={e => body.change(m => (m.every = e.target.value), true)}
            />
            <FieldError error={body.errors.every} testid="every" />
          </label>
        ) : null}
        {f.kind !== 'manual' ? (
          <label className="nbcast-Field">
            <span>Time zone</span>
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
            <FieldError error={body.errors.timezone} testid="timezone" />
          </label>
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
          onChange={(i: number, change: Partial<ParameterInput>) =>
            body.change(m => (m.parameters[i] = { ...m.parameters[i], ...change }))
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

      <label className="nbcast-Field">
        <span>What changed</span>
        <input
          aria-label="What changed"
          placeholder="a note for this version (optional)"
          value={f.message}
          onChange={e => body.change(m => (m.message = e.target.value))}
        />
      </label>
    </div>
  );
}

/** A Lab dialog that stays open until the body has saved (or the user cancels). */
class ScheduleDialog extends Dialog<void> {
  constructor(private readonly _form: ScheduleBody) {
    super({
      title: 'Schedule as report',
      body: _form,
      buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Save and publish' })],
      defaultButton: 1,
      focusNodeSelector: 'input[aria-label="Name"]'
    });
    this.addClass('nbcast-Dialog');
  }

  resolve(index?: number): void {
    if ((index ?? 1) !== 1) {
      super.resolve(index);
      return;
    }
    void this._form.save().then(saved => {
      if (saved) super.resolve(index);
    });
  }
}

/** Open the dialog for the notebook `access` reads; the definition's name once it
 * published, else null. */
export async function openScheduleDialog(access: NotebookAccess): Promise<string | null> {
  let notebook: any;
  let check: NotebookCheck;
  try {
    notebook = await access.read();
    check = await api.check(withoutOutputs(notebook), access.path, browserZone());
  } catch (e) {
    Notification.error(`nbcast: ${e instanceof Error ? e.message : String(e)}`, { autoClose: 8000 });
    return null;
  }
  const body = new ScheduleBody(access, notebook, check);
  const result = await new ScheduleDialog(body).launch();
  return result.button.accept ? body.published : null;
}
