/**
 * What the Reports panel's views read and call: the view shown, the data loaded for
 * it, and the panel's navigation and actions ({@link PanelHost}, which the panel
 * widget implements), so the views do not depend on the widget itself.
 */
import type { Definition, DefinitionDetail, Run, RunDetail, Version } from './api';

export type View =
  | { kind: 'list' }
  | { kind: 'definition'; name: string }
  | { kind: 'run'; name: string; id: number };

/** What the panel's actions do outside it (opening tabs, dialogs). */
export interface PanelActions {
  runNow(definition: DefinitionDetail): Promise<void>;
  backfill(name: string): Promise<void>;
  openDiff(name: string, a: number, b: number): void;
  openRunNotebook(run: RunDetail): void;
  /** Compare run `a`'s report (before) with run `b`'s (after) in a tab. */
  openComparison(definition: string, a: number, b: number): void;
  openNotebook(path: string): void;
}

export interface PanelData {
  definitions: Definition[] | null;
  detail: (DefinitionDetail) | null;
  runs: Run[];
  versions: Version[];
  run: RunDetail | null;
  error: string | null;
  loadedAt: number | null;
}

/** The panel as its views see it. */
export interface PanelHost {
  readonly view: View;
  readonly data: PanelData;
  readonly actions: PanelActions;
  filter: string;
  /** Go to `view` and load it now. */
  go(view: View): void;
  /** Reload what is shown. */
  reload(): void;
  /** Draw again (after a change of `filter`). */
  update(): void;
}
