/**
 * The diff of two versions in a Lab tab, rendered by nbdime's own web components
 * (`NotebookDiffWidget` on a `NotebookDiffModel`: cells added, removed and changed,
 * sources side by side, outputs and metadata), from what the API gives for it:
 * `GET /definitions/{name}/diff?format=nbdime` — version a's stored notebook and
 * nbdime's structured diff to version b (computed, bounded, on the server).
 *
 * Outputs are rendered with Lab's rendermime registry, untrusted (stored versions have
 * no outputs anyway). Should nbdime's widget fail (a diff it cannot lay out), the tab
 * falls back to the server's script-free HTML rendering of the same diff.
 */
import { MainAreaWidget } from '@jupyterlab/apputils';
import type { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { IFrame } from '@jupyterlab/ui-components';
import { Panel, Widget } from '@lumino/widgets';
import { NotebookDiffModel } from 'nbdime/lib/diff/model';
import { NotebookDiffWidget } from 'nbdime/lib/diff/widget';

import { api, diffPage } from './api';

function header(text: string, hint: string, content?: Panel): Widget {
  const node = document.createElement('div');
  node.className = 'nbcast-DiffHeader';
  const title = document.createElement('h2');
  title.textContent = text;
  const sub = document.createElement('div');
  sub.className = 'nbcast-Hint';
  sub.textContent = hint;
  node.append(title, sub);
  if (content) {
    // As nbdime's own web app offers: unchanged cells hidden, on request shown.
    const label = document.createElement('label');
    label.className = 'nbcast-HideUnchanged-toggle';
    const box = document.createElement('input');
    box.type = 'checkbox';
    box.checked = true;
    box.setAttribute('aria-label', 'Hide unchanged cells');
    box.onchange = () => content.toggleClass('nbcast-HideUnchanged', box.checked);
    label.append(box, ' Hide unchanged cells');
    node.append(label);
    content.addClass('nbcast-HideUnchanged');
  }
  return new Widget({ node });
}

/** A main-area tab with nbdime's rendering of the diff from version `a` to `b`. */
export function diffWidget(
  name: string,
  a: number,
  b: number,
  rendermime: IRenderMimeRegistry | null
): MainAreaWidget<Panel> {
  const content = new Panel();
  content.addClass('nbcast-Diff');
  const widget = new MainAreaWidget({ content });
  widget.id = `nbcast-diff-${name}-${a}-${b}`;
  widget.title.label = `${name}: v${a} → v${b}`;
  widget.title.closable = true;
  void render(content, name, a, b, rendermime);
  return widget;
}

async function render(
  content: Panel,
  name: string,
  a: number,
  b: number,
  rendermime: IRenderMimeRegistry | null
): Promise<void> {
  content.addWidget(header(`${name}: v${a} → v${b}`, 'Loading the diff…'));
  try {
    if (!rendermime) throw new Error('no rendermime registry');
    const answer = await api.diffForNbdime(name, a, b);
    const changes = answer.diff.length;
    content.widgets[0].dispose();
    content.addWidget(
      header(
        `${name}: v${a} → v${b}`,
        changes
          ? `nbdime's diff of the two versions (${changes} top-level change${changes > 1 ? 's' : ''})`
          : 'The two versions are the same notebook.',
        content
      )
    );
    const model = new NotebookDiffModel(answer.base as any, answer.diff as any);
    const view = new NotebookDiffWidget({ model, rendermime });
    view.addClass('nbcast-NbdimeDiff');
    content.addWidget(view);
    await view.init();
    content.node.dataset.rendered = 'nbdime';
  } catch (error) {
    console.warn('nbcast: nbdime could not render the diff; showing the server rendering', error);
    for (const w of [...content.widgets]) w.dispose();
    const frame = new IFrame({ sandbox: [] });
    frame.url = diffPage(name, a, b);
    frame.addClass('nbcast-DiffFrame');
    content.addWidget(frame);
    content.node.dataset.rendered = 'html';
  }
}
