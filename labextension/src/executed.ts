/**
 * A run's executed notebook, read-only in a Lab tab: the notebook the worker wrote
 * (`GET /runs/{id}/notebook`), drawn by Lab's own notebook widget — its cells, their
 * outputs through Lab's renderers — with no kernel, no file and no save. Its cells are
 * read-only and it is not a document Lab's notebook commands act on. Outputs render
 * untrusted (HTML sanitized, no script runs), as for any notebook Lab did not run.
 *
 * Without Lab's notebook services (another front end), or should the notebook not
 * load, the tab shows the status UI's script-free rendering in a sandboxed frame.
 */
import { MainAreaWidget } from '@jupyterlab/apputils';
import type { IEditorServices } from '@jupyterlab/codeeditor';
import { Notebook, NotebookModel, type NotebookPanel, StaticNotebook } from '@jupyterlab/notebook';
import type { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { IFrame } from '@jupyterlab/ui-components';
import { Panel, Widget } from '@lumino/widgets';

import { api, runNotebookPage, type RunDetail } from './api';
import { joinedNotebook } from './notebook_json';

/** What Lab provides to draw a notebook. */
export interface NotebookServices {
  rendermime: IRenderMimeRegistry | null;
  editorServices: IEditorServices | null;
  contentFactory: NotebookPanel.IContentFactory | null;
}

function banner(run: RunDetail): Widget {
  const node = document.createElement('div');
  node.className = 'nbcast-ExecutedHeader';
  node.textContent =
    `${run.definition}, run ${run.id} (${run.state}), version ${run.version} — ` +
    'the executed notebook, read-only: nothing in it runs or saves';
  return new Widget({ node });
}

export function executedWidget(run: RunDetail, services: NotebookServices): MainAreaWidget<Panel> {
  const content = new Panel();
  content.addClass('nbcast-Executed');
  const widget = new MainAreaWidget({ content });
  widget.id = `nbcast-run-${run.id}`;
  widget.title.label = `${run.definition} run ${run.id} (read-only)`;
  widget.title.closable = true;
  content.addWidget(banner(run));
  void fill(content, run, services);
  return widget;
}

async function fill(content: Panel, run: RunDetail, services: NotebookServices): Promise<void> {
  const { rendermime, editorServices, contentFactory } = services;
  try {
    if (!rendermime || !editorServices || !contentFactory) {
      throw new Error("Lab's notebook services are not available");
    }
    const json = await api.runNotebook(run.id);
    const model = new NotebookModel();
    model.fromJSON(joinedNotebook(json) as any);
    const notebook = new Notebook({
      rendermime,
      contentFactory,
      mimeTypeService: editorServices.mimeTypeService,
      notebookConfig: { ...StaticNotebook.defaultNotebookConfig, windowingMode: 'none' }
    });
    notebook.addClass('nbcast-ExecutedNotebook');
    notebook.model = model;
    notebook.mode = 'command';
    for (const cell of notebook.widgets) {
      cell.readOnly = true;
    }
    content.addWidget(notebook);
    content.node.dataset.rendered = 'notebook';
  } catch (error) {
    console.warn('nbcast: showing the executed notebook as HTML', error);
    const frame = new IFrame({ sandbox: [] });
    frame.url = runNotebookPage(run.id);
    frame.addClass('nbcast-RunFrame');
    content.addWidget(frame);
    content.node.dataset.rendered = 'html';
  }
}
