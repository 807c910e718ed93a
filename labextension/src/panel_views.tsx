/**
 * The Reports panel's two inner views: one definition (its schedule and coming fires,
 * actions, versions with their diff, runs) and one run (context, parameters, attempts
 * with the failing cell, renditions, deliveries per recipient, and its actions).
 */
import { Notification } from '@jupyterlab/apputils';
import * as React from 'react';

import { api, renditionUrl, type RunDetail } from './api';
import { NextFire, StateBadge, inZone } from './components';
import type { PanelHost } from './panel_model';
import { shownValue } from './values';

const ACTIVE = new Set(['QUEUED', 'LEASED', 'RUNNING']);

/** Run `action`, tell the user how it went, and reload the panel. */
async function act(panel: PanelHost, action: () => Promise<string>): Promise<void> {
  try {
    const message = await action();
    if (message) Notification.success(message, { autoClose: 4000 });
  } catch (e) {
    Notification.error(e instanceof Error ? e.message : String(e), { autoClose: 8000 });
  }
  panel.reload();
}

export function DefinitionView(props: { panel: PanelHost }): JSX.Element {
  const { panel } = props;
  const d = panel.data.detail;
  const [a, setA] = React.useState<number | null>(null);
  const [b, setB] = React.useState<number | null>(null);
  if (!d) {
    return <p className="nbcast-Hint">Loading…</p>;
  }
  const name = d.definition;
  const listed = panel.data.definitions?.find(x => x.name === name);
  const source = listed?.source_path ?? '';
  const versions = panel.data.versions;
  const latest = d.latest_version;
  const va = a ?? Math.max(1, latest - 1);
  const vb = b ?? latest;
  return (
    <div className="nbcast-Definition" data-definition={name}>
      <h3>
        {name} {d.paused ? <span className="nbcast-Paused">paused</span> : null}
      </h3>
      <div className="nbcast-Hint">
        {d.schedule} · version {latest}
        {source && !source.startsWith('api:') ? (
          <>
            {' · '}
            <a href="#" onClick={e => (e.preventDefault(), panel.actions.openNotebook(source))}>
              notebook
            </a>
          </>
        ) : null}
      </div>
      {d.schedule_error ? <div className="nbcast-FieldError">{d.schedule_error}</div> : null}
      <div className="nbcast-Actions">
        <button className="jp-mod-styled jp-mod-accept" onClick={() => void panel.actions.runNow(d)}>
          Run now…
        </button>
        {d.paused ? (
          <button
            className="jp-mod-styled"
            onClick={() => void act(panel, async () => (await api.resume(name), `${name} resumed`))}
          >
            Resume
          </button>
        ) : (
          <button
            className="jp-mod-styled"
            onClick={() => void act(panel, async () => (await api.pause(name), `${name} paused`))}
          >
            Pause
          </button>
        )}
        <button className="jp-mod-styled" onClick={() => void panel.actions.backfill(name)}>
          Backfill…
        </button>
      </div>
      {d.next_fires.length ? (
        <>
          <div className="nbcast-Caption">Next fires ({d.timezone})</div>
          <ul className="nbcast-Fires">
            {d.next_fires.map(f => (
              <li key={f.slot_key} className={f.status === 'skipped' ? 'nbcast-Skipped' : undefined}>
                <NextFire fire={f} />
                {f.note ? <div className="nbcast-DstNote">{f.note}</div> : null}
              </li>
            ))}
          </ul>
        </>
      ) : null}

      <div className="nbcast-Caption">Versions</div>
      <table className="nbcast-Table nbcast-Versions">
        <tbody>
          {[...versions].reverse().map(v => (
            <tr key={v.version} data-version={v.version}>
              <td>v{v.version}</td>
              <td>
                <div className="nbcast-Message">{v.message || <em>no message</em>}</div>
                <div className="nbcast-Hint">
                  {v.author} · {inZone(v.created_at)}
                </div>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {versions.length > 1 ? (
        <div className="nbcast-DiffPick">
          Diff
          <select aria-label="diff from version" value={va} onChange={e => setA(Number(e.target.value))}>
            {versions.map(v => (
              <option key={v.version} value={v.version}>
                v{v.version}
              </option>
            ))}
          </select>
          →
          <select aria-label="diff to version" value={vb} onChange={e => setB(Number(e.target.value))}>
            {versions.map(v => (
              <option key={v.version} value={v.version}>
                v{v.version}
              </option>
            ))}
          </select>
          <button
            className="jp-mod-styled"
            disabled={va === vb}
            onClick={() => panel.actions.openDiff(name, va, vb)}
          >
            Show diff
          </button>
        </div>
      ) : null}

      <div className="nbcast-Caption">Runs (newest first)</div>
      {panel.data.runs.length === 0 ? (
        <p className="nbcast-Hint">No runs yet.</p>
      ) : (
        <table className="nbcast-Table nbcast-Runs">
          <thead>
            <tr>
              <th>#</th>
              <th>Slot</th>
              <th>State</th>
            </tr>
          </thead>
          <tbody>
            {panel.data.runs.map(r => (
              <tr
                key={r.id}
                data-run={r.id}
                data-state={r.state}
                data-kind={r.kind}
                className="nbcast-Clickable"
                onClick={() => panel.go({ kind: 'run', name: name, id: r.id })}
              >
                <td>{r.id}</td>
                <td>
                  {inZone(r.fire_at, d.timezone)}
                  <div className="nbcast-Hint">
                    {r.kind === 'test' ? <span className="nbcast-TestBadge">TEST</span> : null} {testLine(r)}
                  </div>
                </td>
                <td>
                  <StateBadge state={r.state} reason={r.reason} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}

function KeyValues(props: { data: Record<string, unknown> | null | undefined; label: string }): JSX.Element | null {
  const entries = Object.entries(props.data ?? {});
  if (!entries.length) return null;
  return (
    <>
      <div className="nbcast-Caption">{props.label}</div>
      <table className="nbcast-Table nbcast-KeyValues" data-section={props.label}>
        <tbody>
          {entries.map(([k, v]) => (
            <tr key={k}>
              <th>{k}</th>
              <td>
                <code>{shownValue(v)}</code>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  );
}

function errorText(error: RunDetail['error']): string | null {
  if (!error) return null;
  const head = error.ename ? `${error.ename}: ${error.evalue ?? ''}` : error.message ?? error.reason ?? 'failed';
  const where =
    error.cell_index !== null && error.cell_index !== undefined
      ? ` — cell ${error.cell_index}${error.line_number ? `, line ${error.line_number}` : ''}`
      : '';
  return head + where;
}

export function RunView(props: { panel: PanelHost }): JSX.Element {
  const { panel } = props;
  const run = panel.data.run;
  if (!run) {
    return <p className="nbcast-Hint">Loading…</p>;
  }
  const failed = run.deliveries.filter(d => d.state === 'FAILED').length;
  const zone = typeof run.context?.timezone === 'string' ? (run.context.timezone as string) : undefined;
  return (
    <div className="nbcast-Run" data-run={run.id} data-state={run.state}>
      <h3>
        Run {run.id} <StateBadge state={run.state} reason={run.reason} />
      </h3>
      <div className="nbcast-Hint">
        {run.kind === 'test' ? <span className="nbcast-TestBadge">TEST</span> : null} {testLine(run)} ·{' '}
        {run.slot_key ?? 'no slot'} · fires {inZone(run.fire_at, zone)} · version {run.version}
      </div>
      {run.error ? <div className="nbcast-FieldError">{errorText(run.error)}</div> : null}
      {run.error?.source_line ? <pre className="nbcast-Source">{run.error.source_line}</pre> : null}
      <div className="nbcast-Actions">
        {run.attempts.length ? (
          <button className="jp-mod-styled jp-mod-accept" onClick={() => panel.actions.openRunNotebook(run)}>
            Open notebook
          </button>
        ) : null}
        {ACTIVE.has(run.state) ? (
          <button
            className="jp-mod-styled jp-mod-warn"
            onClick={() => void act(panel, async () => `cancel ${(await api.cancel(run.id)).state}: requested`)}
          >
            Cancel
          </button>
        ) : null}
        {failed ? (
          <button
            className="jp-mod-styled"
            onClick={() =>
              void act(panel, async () => `${(await api.retryDeliveries(run.id)).retried} deliveries retried`)
            }
          >
            Retry failed deliveries ({failed})
          </button>
        ) : null}
      </div>
      {run.notebook_sha256 ? <CompareWith panel={panel} run={run} /> : null}
      <KeyValues data={run.context} label="Context" />
      <KeyValues data={run.parameters} label="Parameters" />
      {run.attempts.length ? (
        <>
          <div className="nbcast-Caption">Attempts</div>
          <table className="nbcast-Table nbcast-Attempts">
            <tbody>
              {run.attempts.map(a => (
                <tr key={a.attempt} data-attempt={a.attempt}>
                  <td>#{a.attempt}</td>
                  <td>
                    <StateBadge state={a.outcome ?? 'running'} />
                    <div className="nbcast-Hint">
                      {a.engine} on {a.worker}
                      {a.duration_s !== null && a.duration_s !== undefined ? ` · ${a.duration_s.toFixed(1)} s` : ''}
                    </div>
                    {a.error ? <div className="nbcast-FieldError">{errorText(a.error)}</div> : null}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      ) : null}
      {run.renditions.length ? (
        <>
          <div className="nbcast-Caption">Renditions</div>
          <ul className="nbcast-Renditions">
            {run.renditions.map(r => (
              <li key={r.id} data-rendition={r.format}>
                {r.state === 'DONE' ? (
                  <a href={renditionUrl(run.id, r.id)} target="_blank" rel="noopener noreferrer">
                    {r.format}
                    {r.variant && r.variant !== 'default' ? ` (${r.variant})` : ''}
                  </a>
                ) : (
                  <span>{r.format}</span>
                )}{' '}
                <StateBadge state={r.state} />
                {r.size ? <span className="nbcast-Hint"> {(r.size / 1024).toFixed(1)} KiB</span> : null}
              </li>
            ))}
          </ul>
        </>
      ) : null}
      <div className="nbcast-Caption">Deliveries</div>
      {run.deliveries.length === 0 ? (
        <p className="nbcast-Hint">None (yet).</p>
      ) : (
        <table className="nbcast-Table nbcast-Deliveries">
          <tbody>
            {run.deliveries.map(d => (
              <tr key={d.id} data-delivery={d.recipient} data-state={d.state}>
                <td>{d.channel}</td>
                <td className="nbcast-Recipient">{d.recipient}</td>
                <td>
                  <StateBadge state={d.state} reason={d.reason} />
                  {d.sent_at ? <div className="nbcast-Hint">{inZone(d.sent_at, zone)}</div> : null}
                  {d.possible_duplicate ? <div className="nbcast-Hint">possible duplicate</div> : null}
                  {d.state === 'FAILED' && typeof d.error?.message === 'string' ? (
                    <div className="nbcast-Hint nbcast-DeliveryError" title={d.error.message}>
                      {d.error.message.slice(0, 160)}
                    </div>
                  ) : null}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}

/** A run's kind as a line; a test run's says what it tries and where it goes. */
export function testLine(run: {
  kind: string;
  context?: Record<string, unknown> | null;
  test_to?: string[] | null;
}): string {
  if (run.kind !== 'test') {
    return run.kind;
  }
  const slot = run.context && typeof run.context.slot_key === 'string' ? run.context.slot_key : null;
  const what = slot ? `dry run of slot ${slot}` : 'test run';
  const to = run.test_to && run.test_to.length ? `to ${run.test_to.join(', ')}` : 'to no one';
  return `${what}, ${to}`;
}

/** "Compare with…": another succeeded run of the definition, its report before this one's. */
function CompareWith(props: { panel: PanelHost; run: RunDetail }): JSX.Element | null {
  const { panel, run } = props;
  const others = panel.data.runs.filter(r => r.id !== run.id && r.state === 'SUCCEEDED');
  const [other, setOther] = React.useState<number | null>(null);
  if (!others.length) {
    return null;
  }
  const chosen = other ?? others[0].id;
  return (
    <div className="nbcast-Compare">
      <select aria-label="compare with run" value={chosen} onChange={e => setOther(Number(e.target.value))}>
        {others.map(r => (
          <option key={r.id} value={r.id}>
            #{r.id} · {testLine(r)} · v{r.version}
          </option>
        ))}
      </select>
      <button className="jp-mod-styled" onClick={() => panel.actions.openComparison(run.definition, chosen, run.id)}>
        Compare reports
      </button>
    </div>
  );
}
