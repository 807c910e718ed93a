/**
 * The Reports panel in the left sidebar: the tenant's definitions (next fire with its
 * DST note, last state, paused), one definition's runs (SKIPPED/MISSED with their
 * reasons) and actions, and one run's detail (context, parameters, attempts with the
 * failing cell, renditions, deliveries per recipient).
 *
 * It refreshes what it shows every `refreshSeconds` while it is visible, and not at
 * all while it is hidden (another sidebar tab, the sidebar collapsed, or the browser
 * tab in the background): a Lumino `Poll` started on show and stopped on hide, with
 * standby while the page is hidden. `data-refreshes` on its node counts the refreshes
 * begun (requests sent), which the UI tests read to see that polling stops.
 */
import { Poll } from '@lumino/polling';
import type { Message } from '@lumino/messaging';
import { ReactWidget } from '@jupyterlab/ui-components';
import * as React from 'react';

import { api } from './api';
import { NextFire, StateBadge, inZone } from './components';
import type { PanelActions, PanelData, PanelHost, View } from './panel_model';
import { DefinitionView, RunView } from './panel_views';

export class ReportsPanel extends ReactWidget implements PanelHost {
  view: View = { kind: 'list' };
  data: PanelData = {
    definitions: null,
    detail: null,
    runs: [],
    versions: [],
    run: null,
    error: null,
    loadedAt: null
  };
  filter = '';
  private _poll: Poll;
  private _refreshes = 0;
  private _forced = true;
  private _interval: number;

  constructor(
    readonly actions: PanelActions,
    interval: number
  ) {
    super();
    this._interval = interval;
    this.id = 'nbcast-reports';
    this.addClass('nbcast-Panel');
    this.title.caption = 'nbcast reports';
    this._poll = new Poll({
      auto: false,
      factory: () => this.refresh(),
      frequency: { interval: interval * 1000, backoff: true, max: 10 * interval * 1000 },
      name: 'nbcast:reports',
      standby: () => !this.isVisible || 'when-hidden'
    });
  }

  set interval(seconds: number) {
    this._interval = seconds;
    this._poll.frequency = { interval: seconds * 1000, backoff: true, max: 10 * seconds * 1000 };
  }

  /** Seconds between two polls of the whole list: the interval, or one second per
 * hundred reports if that is longer (a tenant of 10,000 reports is walked every
 * 100 s, not every 5 s; what the user opens, or asks for, is loaded at once). */
  listGap(): number {
    return Math.max(this._interval, (this.data.definitions?.length ?? 0) / 100);
  }

  /** Load what the current view shows. */
  async refresh(): Promise<void> {
    const view = this.view;
    const forced = this._forced;
    this._forced = false;
    if (
      view.kind === 'list' &&
      !forced &&
      this.data.definitions !== null &&
      this.data.loadedAt !== null &&
      Date.now() - this.data.loadedAt < this.listGap() * 1000 - 250
    ) {
      return;
    }
    const started = performance.now();
    // Refreshes begun (requests sent): what the UI tests count to see polling stop.
    this._refreshes += 1;
    this.node.dataset.refreshes = String(this._refreshes);
    try {
      if (view.kind === 'list') {
        const definitions = await api.allDefinitions();
        // How long the requests took (the benchmark reads it beside the time to show).
        this.node.dataset.loadMs = (performance.now() - started).toFixed(1);
        if (view !== this.view) return;
        this.data = { ...this.data, definitions, error: null };
      } else if (view.kind === 'definition') {
        const [detail, runs, versions] = await Promise.all([
          api.definition(view.name),
          api.runs(view.name, 50),
          api.versions(view.name)
        ]);
        if (view !== this.view) return;
        this.data = { ...this.data, detail, runs: runs.items, versions: versions.items, error: null };
      } else {
        const run = await api.run(view.id);
        if (view !== this.view) return;
        this.data = { ...this.data, run, error: null };
      }
      this.data.loadedAt = Date.now();
    } catch (e) {
      if (view !== this.view) return;
      this.data = { ...this.data, error: e instanceof Error ? e.message : String(e) };
      this.update();
      throw e; // the poll backs off
    }
    this.update();
  }

  /** Go to `view` and load it now (not `show`: that is the widget's own). */
  go(view: View): void {
    this.view = view;
    if (view.kind === 'definition') {
      this.data = { ...this.data, detail: null, runs: [], versions: [] };
    } else if (view.kind === 'run') {
      this.data = { ...this.data, run: null };
    }
    this.update();
    this.reload();
  }

  /** Reload now (after an action, on show, on the refresh button). */
  reload(): void {
    this._forced = true;
    void this._poll.refresh();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    // Starting the poll (stopped while hidden) loads the view at once; a refresh on top
    // would load it twice.
    this._forced = true;
    if (this._poll.isDisposed) return;
    if (this._poll.state.phase === 'stopped' || this._poll.state.phase === 'constructed') {
      void this._poll.start();
    } else {
      this.reload();
    }
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    void this._poll.stop();
  }

  dispose(): void {
    this._poll.dispose();
    super.dispose();
  }

  render(): JSX.Element {
    return (
      <div className="nbcast-PanelBody" data-view={this.view.kind}>
        <div className="nbcast-PanelHeader">
          {this.view.kind !== 'list' ? (
            <button
              className="jp-mod-styled nbcast-Back"
              onClick={() =>
                this.go(
                  this.view.kind === 'run' ? { kind: 'definition', name: this.view.name } : { kind: 'list' }
                )
              }
            >
              ← {this.view.kind === 'run' ? this.view.name : 'Reports'}
            </button>
          ) : (
            <h2>Reports</h2>
          )}
          <button className="jp-mod-styled nbcast-Refresh" title="Refresh now" onClick={() => this.reload()}>
            ⟳
          </button>
        </div>
        {this.data.error ? (
          <div className="nbcast-FieldError" role="alert">
            {this.data.error}
          </div>
        ) : null}
        {this.view.kind === 'list' ? (
          <DefinitionList panel={this} />
        ) : this.view.kind === 'definition' ? (
          <DefinitionView panel={this} />
        ) : (
          <RunView panel={this} />
        )}
      </div>
    );
  }
}

/** The definitions, filterable by name. */
function DefinitionList(props: { panel: PanelHost }): JSX.Element {
  const { panel } = props;
  const all = panel.data.definitions;
  if (all === null) {
    return <p className="nbcast-Hint">Loading…</p>;
  }
  if (all.length === 0) {
    return (
      <p className="nbcast-Hint" data-empty="yes">
        No reports yet. Open a notebook and use <strong>Schedule as report…</strong> in its toolbar.
      </p>
    );
  }
  const needle = panel.filter.trim().toLowerCase();
  const shown = needle ? all.filter(d => d.name.toLowerCase().includes(needle)) : all;
  return (
    <>
      <input
        className="nbcast-Filter"
        aria-label="Filter reports"
        placeholder={`Filter ${all.length.toLocaleString('en')} reports`}
        value={panel.filter}
        onChange={e => {
          panel.filter = e.target.value;
          panel.update();
        }}
      />
      <table className="nbcast-Table nbcast-Definitions" data-count={all.length}>
        <thead>
          <tr>
            <th>Report</th>
            <th>Next fire</th>
            <th>Last run</th>
          </tr>
        </thead>
        <tbody>
          {shown.map(d => {
            const next = d.next_fires[0];
            return (
              <tr
                key={d.name}
                data-definition={d.name}
                className="nbcast-Clickable"
                onClick={() => panel.go({ kind: 'definition', name: d.name })}
              >
                <td>
                  <span className="nbcast-Name">{d.name}</span>
                  {d.paused ? <span className="nbcast-Paused">paused</span> : null}
                  <div className="nbcast-Hint">{d.schedule}</div>
                </td>
                <td>
                  {d.paused ? '—' : next ? <NextFire fire={next} /> : inZone(d.next_fire_at, d.timezone)}
                  {!d.paused && next?.note ? (
                    <div className="nbcast-DstNote" title={next.note}>
                      {next.note}
                    </div>
                  ) : null}
                  {d.schedule_error ? <div className="nbcast-FieldError">{d.schedule_error}</div> : null}
                </td>
                <td>
                  {d.last_run ? <StateBadge state={d.last_run.state} reason={d.last_run.reason} /> : '—'}
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </>
  );
}
