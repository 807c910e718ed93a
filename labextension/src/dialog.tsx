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
import { ScheduleFormView, type FormHost, type PreviewState } from './dialog_view';
import { resolvedValues } from './form/bindings';
import {
  blockToForm,
  fieldKey,
  formBindings,
  formToBlock,
  isAdvanced,
  type Block,
  type FormModel
} from './form/model';
import { browserZone, previewLines, previewQuery, previewRanges } from './form/preview';

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
export class ScheduleBody extends ReactWidget implements FormHost {
  form: FormModel;
  original: Block | null;
  check: NotebookCheck | null = null;
  errors: Record<string, string> = {};
  preview: PreviewState = {
    next: [],
    ahead: [],
    error: null,
    loading: false,
    of: '',
    resolved: {}
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
      result,
      this.schema.map(s => s.name)
    );
    this.errors = { [key]: field && key === 'general' ? `${field}: ${message}` : message };
    if (isAdvanced(key)) {
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
      this.preview = { next: [], ahead: [], error: null, loading: false, of, resolved: {} };
      this.update();
      return;
    }
    // The bound parameters resolve for the next slots with the scheduler's own rules.
    const bindings = formBindings(f.parameters);
    this.preview = { ...this.preview, loading: true };
    this.update();
    let error: string | null = null;
    for (const range of ranges) {
      const query = previewQuery(f.kind, f.cron, f.every, f.timezone, f.advanced.dstGap, f.advanced.dstFold, range)!;
      if (Object.keys(bindings).length) query.bindings = JSON.stringify(bindings);
      try {
        const rows = await api.preview(query);
        if (generation !== this._generation) return;
        this.preview = { ...previewLines(rows), error: null, loading: false, of, resolved: resolvedValues(rows) };
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
    this.preview = { next: [], ahead: [], error, loading: false, of, resolved: {} };
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
      if (Object.keys(result.errors).some(isAdvanced)) this.openAdvanced = true;
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
