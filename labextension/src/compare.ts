/**
 * Two runs' reports compared, in a Lab tab: the page the server renders for
 * `GET /runs/{a}/diff/{b}?format=html` (tables cell by cell with their changes, text,
 * images side by side; no script), framed without scripts like the executed notebook.
 */
import { MainAreaWidget } from '@jupyterlab/apputils';
import { IFrame } from '@jupyterlab/ui-components';

import { comparePage } from './api';

/** The comparison page of run `a`'s report (before) and run `b`'s, framed without scripts. */
export function comparisonFrame(a: number, b: number): IFrame {
  const frame = new IFrame({ sandbox: [] });
  frame.url = comparePage(a, b);
  frame.addClass('nbcast-CompareFrame');
  return frame;
}

/** A main-area tab comparing run `a`'s report (before) with run `b`'s (after). */
export function comparisonWidget(definition: string, a: number, b: number): MainAreaWidget<IFrame> {
  const frame = comparisonFrame(a, b);
  const widget = new MainAreaWidget({ content: frame });
  widget.id = `nbcast-compare-${a}-${b}`;
  widget.title.label = `${definition}: run ${a} → run ${b}`;
  widget.title.closable = true;
  widget.node.dataset.compare = `${a}-${b}`;
  return widget;
}
