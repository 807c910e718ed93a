/**
 * The diff of two versions in a Lab tab, rendered by nbdime's own web components
 * (`NotebookDiffWidget` on a `NotebookDiffModel`: cells added, removed and changed,
 * sources side by side, outputs and metadata), from what the API gives for it:
 * `GET /definitions/{name}/diff?format=nbdime` — version a's stored notebook and
 * nbdime's structured diff to version b (computed, bounded, on the server).
 *
 * Above it, what changes for recipients — effective parameters (a default the
 * metadata block hides is flagged), schedule with its next fires, recipients, outputs —
 * from the same answer's `summary`, so a metadata change never hides in nbdime's
 * collapsed "Notebook metadata changed" row.
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

import { api, diffPage, type ReviewSummary } from './api';
import { compareOutputsWidget } from './compare_versions';

const SECTIONS = ['parameters', 'schedule', 'recipients', 'outputs', 'settings', 'code'];

/** The review summary as a widget: a list per section, warnings marked. */
export function summaryWidget(summary: ReviewSummary): Widget {
  const node = document.createElement('section');
  node.className = 'nbcast-ReviewSummary';
  const title = document.createElement('h3');
  title.textContent = 'What changes for recipients';
  node.append(title);
  if (!summary.items.length) {
    const none = document.createElement('p');
    none.className = 'nbcast-Hint';
    none.textContent = 'Nothing that recipients receive changes.';
    node.append(none);
  }
  for (const section of SECTIONS) {
    const items = summary.items.filter(i => i.section === section);
    if (!items.length) continue;
    const head = document.createElement('h4');
    head.textContent = section[0].toUpperCase() + section.slice(1);
    const list = document.createElement('ul');
    list.dataset.section = section;
    for (const item of items) {
      const li = document.createElement('li');
      li.textContent = item.text;
      if (item.warning) li.className = 'nbcast-ReviewWarning';
      list.append(li);
    }
    if (section === 'schedule' && (summary.fires_before.length || summary.fires_after.length)) {
      for (const [label, fires] of [
        ['next fires before', summary.fires_before],
        ['next fires after', summary.fires_after]
      ] as const) {
        const li = document.createElement('li');
        li.className = 'nbcast-Hint';
        li.textContent = `${label}: ${fires.join(', ') || 'none'}`;
        list.append(li);
      }
    }
    node.append(head, list);
  }
  if (summary.more) {
    const more = document.createElement('p');
    more.textContent = `… and ${summary.more} more changes`;
    node.append(more);
  }
  return new Widget({ node });
}

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
    if (answer.summary) content.addWidget(summaryWidget(answer.summary));
    content.addWidget(compareOutputsWidget(name, a, b, content));
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
