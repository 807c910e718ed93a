/**
 * The panel's actions that open something: "Run now" with a parameter form, "Backfill"
 * with a range.
 *
 * "Run now" offers a test first: a test run (rendered, sent to no subscriber: only to
 * the addresses given, by default the caller's own), then a dry run of one of the next
 * slots (exactly what that slot will send, optionally as one recipient), and last a
 * real run for every subscriber.
 */
import { Dialog, Notification } from '@jupyterlab/apputils';
import { ReactWidget } from '@jupyterlab/ui-components';
import * as React from 'react';

import { api, type DefinitionDetail, type RunCreated, type TestOptions } from './api';
import { Field, FieldError, ParameterRows } from './components';
import { parameterInputs, parameterValues, type Block, type ParameterInput } from './form/model';

/** A dialog whose accept button runs `submit` and closes only when it succeeds. */
class CheckedDialog extends Dialog<void> {
  constructor(
    options: Partial<Dialog.IOptions<void>>,
    private readonly _submit: () => Promise<boolean>
  ) {
    super(options);
  }

  resolve(index?: number): void {
    if ((index ?? 1) !== 1) {
      super.resolve(index);
      return;
    }
    void this._submit().then(ok => {
      if (ok) super.resolve(index);
    });
  }
}

/** What "Run now" queues: a test run, a dry run of a slot, or a run for everyone. */
export type RunMode = 'test' | 'slot' | 'real';

const RUN_MODES: [RunMode, string, string][] = [
  ['test', 'A test run', 'Rendered and sent only to the addresses below (marked TEST); no subscriber gets it.'],
  [
    'slot',
    'A dry run of a slot',
    "Exactly what that slot will send — its version, dates and each audience's data — to the addresses below only."
  ],
  ['real', 'A run for the subscribers', 'Delivered to every subscriber now, like a scheduled run.']
];

const BUTTONS: Record<RunMode, string> = { test: 'Run test', slot: 'Dry-run slot', real: 'Run for subscribers' };

/** The addresses typed into "Send to" ([] for none typed). */
export function addressList(text: string): string[] {
  return text
    .split(/[,;\s]+/)
    .map(a => a.trim())
    .filter(a => a);
}

class RunNowBody extends ReactWidget {
  inputs: ParameterInput[];
  errors: Record<string, string> = {};
  mode: RunMode = 'test';
  to = '';
  noOne = false;
  slot: string;
  as = '';
  onMode: (mode: RunMode) => void = () => undefined;

  constructor(readonly definition: DefinitionDetail) {
    super();
    this.addClass('nbcast-RunNow');
    // The form starts from the version's own values (bindings included).
    const given = definition.nbcast?.parameters;
    this.inputs = parameterInputs(
      definition.parameters,
      given && typeof given === 'object' && !Array.isArray(given) ? (given as Block) : {}
    );
    this.slot = this.slots[0] ?? '';
  }

  /** The next slots that fire (a skipped one never runs: nothing to dry-run). */
  get slots(): string[] {
    return (this.definition.next_fires ?? []).filter(f => f.status !== 'skipped').map(f => f.slot_key);
  }

  /** The recipients of the version's subscriptions, for "as". */
  get recipients(): string[] {
    const subs = this.definition.nbcast?.subscriptions;
    if (!Array.isArray(subs)) {
      return [];
    }
    const found = subs.map(s => (s && typeof s === 'object' ? String((s as Block).to ?? '') : '')).filter(t => t);
    return [...new Set(found)];
  }

  private testOptions(): TestOptions | undefined {
    if (this.mode === 'real') {
      return undefined;
    }
    const options: TestOptions = {};
    if (this.noOne) {
      options.to = [];
    } else if (this.to.trim()) {
      options.to = addressList(this.to);
    }
    if (this.mode === 'slot') {
      options.slot = this.slot;
      if (this.as) {
        options.as = this.as;
      }
    }
    return options;
  }

  private announce(created: RunCreated): void {
    const name = this.definition.definition;
    const runs = created.run_ids.join(', ');
    if (!created.test) {
      Notification.success(`${name}: run ${runs} queued for the subscribers`, { autoClose: 4000 });
      return;
    }
    const what = created.slot_key ? `dry run of slot ${created.slot_key}` : 'test run';
    const where = created.to && created.to.length ? `to ${created.to.join(', ')}` : 'to no one';
    Notification.success(`${name}: ${what} ${runs} queued, going ${where}`, { autoClose: 6000 });
  }

  async submit(): Promise<boolean> {
    const errors: Record<string, string> = {};
    let values: ReturnType<typeof parameterValues> = {};
    if (this.mode === 'slot' && !this.slot) {
      this.errors = { slot: 'This report has no coming slot to dry-run.' };
      this.update();
      return false;
    }
    try {
      if (this.mode !== 'slot') {
        values = parameterValues(this.inputs, this.definition.parameters, errors);
      }
    } catch (e) {
      this.errors = { general: e instanceof Error ? e.message : String(e) };
      this.update();
      return false;
    }
    this.errors = errors;
    if (Object.keys(errors).length) {
      this.update();
      return false;
    }
    try {
      const created = await api.runNow(this.definition.definition, values, this.testOptions());
      this.announce(created);
      return true;
    } catch (e) {
      // The server names the parameter in its message ("top_n: 'x' is not an int").
      const message = e instanceof Error ? e.message : String(e);
      const field = e instanceof Error && 'field' in e ? String((e as { field: unknown }).field ?? '') : '';
      const named = this.definition.parameters.find(p => message.includes(p.name))?.name;
      const key = ['to', 'slot', 'as'].includes(field) ? field : named ? `parameter:${named}` : 'general';
      this.errors = { [key]: message };
      this.update();
      return false;
    }
  }

  render(): JSX.Element {
    const set = (change: Partial<RunNowBody>): void => {
      Object.assign(this, change);
      this.update();
    };
    return (
      <div className="nbcast-Form">
        <fieldset className="nbcast-RunModes" aria-label="what to run">
          {RUN_MODES.map(([mode, label, hint]) => (
            <label key={mode} className="nbcast-RunMode" data-mode={mode}>
              <input
                type="radio"
                name="nbcast-run-mode"
                value={mode}
                checked={this.mode === mode}
                onChange={() => {
                  set({ mode, errors: {} });
                  this.onMode(mode);
                }}
              />
              <span>
                <b>{label}</b> <span className="nbcast-Hint">{hint}</span>
              </span>
            </label>
          ))}
        </fieldset>
        <FieldError error={this.errors.general} testid="general" />
        {this.mode === 'slot' ? (
          <>
            <Field label="Slot" error={this.errors.slot} errorKey="slot">
              <select aria-label="slot" value={this.slot} onChange={e => set({ slot: e.target.value })}>
                {this.slots.map(key => (
                  <option key={key} value={key}>
                    {key}
                  </option>
                ))}
              </select>
            </Field>
            <Field label="As recipient" error={this.errors.as} errorKey="as">
              <select aria-label="as recipient" value={this.as} onChange={e => set({ as: e.target.value })}>
                <option value="">every audience</option>
                {this.recipients.map(to => (
                  <option key={to} value={to}>
                    {to}
                  </option>
                ))}
              </select>
            </Field>
          </>
        ) : null}
        {this.mode !== 'real' ? (
          <Field label="Send to" error={this.errors.to} errorKey="to">
            <input
              aria-label="send to"
              placeholder="your own address (leave empty)"
              disabled={this.noOne}
              value={this.to}
              onChange={e => set({ to: e.target.value })}
            />
            <label className="nbcast-Check">
              <input
                type="checkbox"
                aria-label="send to no one"
                checked={this.noOne}
                onChange={e => set({ noOne: e.target.checked })}
              />
              no one: only render it (the files are in the run's detail)
            </label>
          </Field>
        ) : (
          <p className="nbcast-Hint nbcast-Warning" role="note">
            Every subscriber of version {this.definition.version} receives this run.
          </p>
        )}
        {this.mode !== 'slot' ? (
          <>
            <p className="nbcast-Hint">
              Version {this.definition.version}, reporting the period of now. A parameter bound to the slot's period
              resolves for this run.
            </p>
            <ParameterRows
              schema={this.definition.parameters}
              inputs={this.inputs}
              errors={this.errors}
              onChange={(i, change) => {
                this.inputs[i] = { ...this.inputs[i], ...change };
                this.update();
              }}
            />
          </>
        ) : null}
      </div>
    );
  }
}

export async function runNowDialog(definition: DefinitionDetail): Promise<boolean> {
  const body = new RunNowBody(definition);
  const dialog = new CheckedDialog(
    {
      title: `Run ${definition.definition} now`,
      body,
      buttons: [Dialog.cancelButton(), Dialog.okButton({ label: BUTTONS.test })],
      defaultButton: 1
    },
    () => body.submit()
  );
  // The accept button names what it queues.
  body.onMode = mode => {
    const accept = dialog.node.querySelector('.jp-Dialog-button.jp-mod-accept .jp-Dialog-buttonLabel');
    if (accept) {
      accept.textContent = BUTTONS[mode];
    }
  };
  return (await dialog.launch()).button.accept;
}

class BackfillBody extends ReactWidget {
  from = '';
  until = '';
  error = '';

  constructor(readonly name: string) {
    super();
    const today = new Date();
    const week = new Date(today.getTime() - 7 * 86_400_000);
    this.until = today.toISOString().slice(0, 10);
    this.from = week.toISOString().slice(0, 10);
  }

  async submit(): Promise<boolean> {
    try {
      const result = await api.backfill(this.name, this.from, this.until);
      Notification.success(
        `${this.name}: ${result.inserted} backfill runs queued (${result.slots} slots, ${result.already_recorded} already recorded)`,
        { autoClose: 5000 }
      );
      return true;
    } catch (e) {
      this.error = e instanceof Error ? e.message : String(e);
      this.update();
      return false;
    }
  }

  render(): JSX.Element {
    return (
      <div className="nbcast-Form">
        <p className="nbcast-Hint">
          Queue one run for every slot in [from, until), each reporting its own period. Dates are the start of
          that day in the schedule's zone; slots that already have a row are left alone.
        </p>
        <Field label="From">
          <input
            type="date"
            aria-label="Backfill from"
            value={this.from}
            onChange={e => ((this.from = e.target.value), this.update())}
          />
        </Field>
        <Field label="Until">
          <input
            type="date"
            aria-label="Backfill until"
            value={this.until}
            onChange={e => ((this.until = e.target.value), this.update())}
          />
        </Field>
        <FieldError error={this.error} testid="backfill" />
      </div>
    );
  }
}

export async function backfillDialog(name: string): Promise<boolean> {
  const body = new BackfillBody(name);
  const dialog = new CheckedDialog(
    {
      title: `Backfill ${name}`,
      body,
      buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Backfill' })],
      defaultButton: 1
    },
    () => body.submit()
  );
  return (await dialog.launch()).button.accept;
}
