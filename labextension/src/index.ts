/**
 * nbcast's JupyterLab extension: schedule a notebook as a report, watch its runs and
 * diff its versions without leaving Lab. It talks only to nbcast's REST API (the
 * server extension `nbcast.server_extension`, enabled with `jupyter lab`).
 *
 * - Command `nbcast:schedule` ("Schedule as report…"): the notebook toolbar button and
 *   the file browser's context-menu item on notebooks come from `schema/plugin.json`;
 *   the command palette lists it too. It opens the dialog of `dialog.tsx`.
 * - The "Reports" panel in the left sidebar (`panel.tsx`), and the command
 *   `nbcast:open-reports` that shows it.
 * - Main-area tabs for a diff of two versions and a run's executed notebook.
 */
import {
  ILayoutRestorer,
  type JupyterFrontEnd,
  type JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, type MainAreaWidget } from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { IDefaultFileBrowser } from '@jupyterlab/filebrowser';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { IEditorServices } from '@jupyterlab/codeeditor';
import type { Contents } from '@jupyterlab/services';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { LabIcon } from '@jupyterlab/ui-components';

import { backfillDialog, runNowDialog } from './actions';
import { comparisonWidget } from './compare';
import { executedWidget } from './executed';
import { fileAccess, openScheduleDialog, readFile, type NotebookAccess } from './dialog';
import type { Block } from './form/model';
import { ReportsPanel } from './panel';

const PLUGIN_ID = 'nbcast:plugin';

export const nbcastIcon = new LabIcon({
  name: 'nbcast:icon',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16" height="16">' +
    '<g class="jp-icon3" fill="#616161">' +
    '<path d="M19 4h-1V2h-2v2H8V2H6v2H5a2 2 0 0 0-2 2v14a2 2 0 0 0 2 2h14a2 2 0 0 0 2-2V6a2 2 0 0 0-2-2zm0 16H5V9h14v11z"/>' +
    '<path d="M7 11h5v5H7z"/></g></svg>'
});

/** Reads and writes a notebook through its open editor (unsaved edits included). */
function panelAccess(panel: NotebookPanel, contents: Contents.IManager): NotebookAccess {
  return {
    path: panel.context.path,
    async read() {
      // Saved: the file, as publishing will read it; unsaved edits: the editor's.
      const model = panel.context.model;
      return model.dirty ? model.toJSON() : readFile(contents, panel.context.path);
    },
    async writeBlock(block: Block) {
      panel.context.model.setMetadata('nbcast', block);
      await panel.context.save();
    }
  };
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Schedule a notebook as an nbcast report, watch its runs, diff its versions.',
  autoStart: true,
  requires: [INotebookTracker, IDocumentManager],
  optional: [
    ICommandPalette,
    ILayoutRestorer,
    ISettingRegistry,
    IDefaultFileBrowser,
    IRenderMimeRegistry,
    IEditorServices,
    NotebookPanel.IContentFactory
  ],
  activate: (
    app: JupyterFrontEnd,
    notebooks: INotebookTracker,
    docManager: IDocumentManager,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null,
    settings: ISettingRegistry | null,
    fileBrowser: IDefaultFileBrowser | null,
    rendermime: IRenderMimeRegistry | null,
    editorServices: IEditorServices | null,
    contentFactory: NotebookPanel.IContentFactory | null
  ) => {
    const { commands, shell, serviceManager } = app;

    const openTab = (widget: MainAreaWidget) => {
      const existing = Array.from(shell.widgets('main')).find(w => w.id === widget.id);
      if (existing) {
        widget.dispose();
        shell.activateById(existing.id);
        return;
      }
      shell.add(widget, 'main');
      shell.activateById(widget.id);
    };

    const panel = new ReportsPanel(
      {
        runNow: async definition => {
          if (await runNowDialog(definition)) panel.reload();
        },
        backfill: async name => {
          if (await backfillDialog(name)) panel.reload();
        },
        // nbdime's components (most of the bundle) load when a diff is first opened.
        openDiff: (name, a, b) =>
          void import('./diff').then(({ diffWidget }) => openTab(diffWidget(name, a, b, rendermime))),
        openRunNotebook: run =>
          openTab(executedWidget(run, { rendermime, editorServices, contentFactory })),
        openComparison: (definition, a, b) => openTab(comparisonWidget(definition, a, b)),
        openNotebook: path => {
          // A definition is bound to the file's absolute path; Lab opens paths under its root.
          const root = (app as any).paths?.directories?.serverRoot as string | undefined;
          let relative = path;
          const prefix = root ? root.replace(/\/+$/, '') + '/' : null;
          if (prefix && path.startsWith(prefix)) relative = path.slice(prefix.length);
          void docManager.openOrReveal(relative);
        }
      },
      5
    );
    panel.title.icon = nbcastIcon;
    shell.add(panel, 'left', { rank: 600 });
    restorer?.add(panel, panel.id);

    if (settings) {
      void settings
        .load(PLUGIN_ID)
        .then(loaded => {
          const apply = () => {
            const seconds = Number(loaded.get('refreshSeconds').composite);
            panel.interval = Number.isFinite(seconds) ? Math.min(3600, Math.max(2, seconds)) : 5;
          };
          apply();
          loaded.changed.connect(apply);
        })
        .catch(reason => console.warn('nbcast: settings not loaded', reason));
    }

    commands.addCommand('nbcast:schedule', {
      label: 'Schedule as report…',
      caption: 'Schedule this notebook as an nbcast report (cron, parameters, recipients)',
      icon: nbcastIcon,
      isEnabled: args =>
        typeof args.path === 'string' ||
        (args.origin === 'filebrowser' ? !!fileBrowser : notebooks.currentWidget !== null),
      execute: async args => {
        let access: NotebookAccess | null = null;
        let path: string | null = typeof args.path === 'string' ? args.path : null;
        if (path === null && args.origin === 'filebrowser' && fileBrowser) {
          const item = fileBrowser.selectedItems().next();
          path = item && !item.done ? item.value.path : null;
        }
        if (path !== null) {
          const open = notebooks.find(w => w.context.path === path);
          access = open ? panelAccess(open, serviceManager.contents) : fileAccess(serviceManager.contents, path);
        } else if (notebooks.currentWidget) {
          access = panelAccess(notebooks.currentWidget, serviceManager.contents);
        }
        if (!access) return;
        const published = await openScheduleDialog(access);
        if (published) {
          // The panel shows the report just published (its versions, next fires).
          panel.go({ kind: 'definition', name: published });
        }
      }
    });

    commands.addCommand('nbcast:open-reports', {
      label: 'Show nbcast reports',
      caption: 'The Reports panel: definitions, runs, deliveries, versions',
      execute: () => shell.activateById(panel.id)
    });

    if (palette) {
      palette.addItem({ command: 'nbcast:schedule', category: 'nbcast' });
      palette.addItem({ command: 'nbcast:open-reports', category: 'nbcast' });
    }
  }
};

export default plugin;
