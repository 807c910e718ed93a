/**
 * The panel's actions that open something: "Run now" with a parameter form, "Backfill"
 * with a range.
 */
import { Dialog, Notification } from '@jupyterlab/apputils';
import { ReactWidget } from '@jupyterlab/ui-components';
import * as React from 'react';

import { api, type DefinitionDetail } from './api';
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

class RunNowBody extends ReactWidget {
  inputs: ParameterInput[];
  errors: Record<string, string> = {};

  constructor(readonly definition: DefinitionDetail) {
    super();
    this.addClass('nbcast-RunNow');
    // The form starts from the version's own values (bindings included).
    const given = definition.nbcast?.parameters;
    this.inputs = parameterInputs(
      definition.parameters,
      given && typeof given === 'object' && !Array.isArray(given) ? (given as Block) : {}
    );
  }

  async submit(): Promise<boolean> {
    const errors: Record<string, string> = {};
    let values: ReturnType<typeof parameterValues>;
    try {
      values = parameterValues(this.inputs, this.definition.parameters, errors);
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
      const created = await api.runNow(this.definition.definition, values);
      Notification.success(`${this.definition.definition}: run ${created.run_ids.join(', ')} queued`, {
        autoClose: 4000
      });
      return true;
    } catch (e) {
      // The server names the parameter in its message ("top_n: 'x' is not an int").
      const message = e instanceof Error ? e.message : String(e);
      const named = this.definition.parameters.find(p => message.includes(p.name))?.name;
      this.errors = { [named ? `parameter:${named}` : 'general']: message };
      this.update();
      return false;
    }
  }

  render(): JSX.Element {
    return (
      <div className="nbcast-Form">
        <p className="nbcast-Hint">
          A manual run of version {this.definition.version}, reporting the period of now. A parameter bound to
          the slot's period resolves for this run.
        </p>
        <FieldError error={this.errors.general} testid="general" />
        <ParameterRows
          schema={this.definition.parameters}
          inputs={this.inputs}
          errors={this.errors}
          onChange={(i, change) => {
            this.inputs[i] = { ...this.inputs[i], ...change };
            this.update();
          }}
        />
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
      buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Run now' })],
      defaultButton: 1
    },
    () => body.submit()
  );
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
