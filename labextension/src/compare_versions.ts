/**
 * "Compare outputs" in a version diff's tab: what the two versions' reports show on the
 * same slot. The user picks a slot that one of the two versions ran (a succeeded
 * scheduled or backfilled run, newest first); the other version is dry-run on that slot
 * (`POST /definitions/{name}/runs` with `test`, `slot`, `version` and `to: []`: rendered,
 * sent to no one), and once it has run the comparison of the two reports — the older
 * version's before, the newer's after — is shown below, as the status page shows it.
 * Everything goes through the API; the dry run is an ordinary test run, listed as one.
 */
import { Panel, Widget } from '@lumino/widgets';

import { api, type Run } from './api';
import { comparisonFrame } from './compare';

const FINISHED = new Set(['SUCCEEDED', 'FAILED', 'TIMED_OUT', 'CANCELLED', 'SKIPPED', 'MISSED']);
const POLL_MS = 2000;
const WAIT_MS = 15 * 60_000;

/** The runs a comparison can start from: version `a`'s or `b`'s succeeded slot runs. */
export function slotRuns(runs: Run[], a: number, b: number): Run[] {
  return runs.filter(r => r.state === 'SUCCEEDED' && r.slot_key && (r.version === a || r.version === b)).slice(0, 20);
}

/** The bar under the review summary, and the comparison it opens. */
export function compareOutputsWidget(name: string, a: number, b: number, content: Panel): Widget {
  const node = document.createElement('div');
  node.className = 'nbcast-CompareOutputs';
  const label = document.createElement('span');
  label.textContent = `Compare the reports of v${a} and v${b} on a slot: `;
  const select = document.createElement('select');
  select.setAttribute('aria-label', 'compare outputs on slot');
  const button = document.createElement('button');
  button.className = 'jp-mod-styled';
  button.textContent = 'Compare outputs';
  const status = document.createElement('span');
  status.className = 'nbcast-Hint';
  status.dataset.compareStatus = 'idle';
  node.append(label, select, button, status);
  const widget = new Widget({ node });
  let candidates: Run[] = [];
  void api.runs(name, 200).then(page => {
    candidates = slotRuns(page.items, a, b);
    for (const run of candidates) {
      const option = document.createElement('option');
      option.value = String(run.id);
      option.textContent = `${run.slot_key} (v${run.version}, run ${run.id})`;
      select.append(option);
    }
    if (!candidates.length) {
      status.textContent = `no slot run of v${a} or v${b} yet`;
      button.disabled = true;
    }
  });
  button.onclick = () => {
    const base = candidates.find(r => String(r.id) === select.value);
    if (!base || !base.slot_key) return;
    button.disabled = true;
    void compare(name, a, b, base, status, content, widget).finally(() => (button.disabled = false));
  };
  return widget;
}

async function compare(
  name: string,
  a: number,
  b: number,
  base: Run,
  status: HTMLElement,
  content: Panel,
  bar: Widget
): Promise<void> {
  const other = base.version === a ? b : a;
  const say = (text: string, state: string) => {
    status.textContent = text;
    status.dataset.compareStatus = state;
  };
  try {
    const created = await api.runNow(name, {}, { slot: base.slot_key!, version: other, to: [] });
    const dry = created.run_ids[0];
    say(`dry run ${dry} of v${other} on ${base.slot_key}: queued`, 'waiting');
    const deadline = Date.now() + WAIT_MS;
    for (;;) {
      const run = await api.run(dry);
      if (FINISHED.has(run.state)) {
        if (run.state !== 'SUCCEEDED') {
          say(`dry run ${dry} ended ${run.state}${run.reason ? ` (${run.reason})` : ''}`, 'failed');
          return;
        }
        break;
      }
      if (Date.now() > deadline) {
        say(`dry run ${dry} is still ${run.state}: is a worker running?`, 'failed');
        return;
      }
      say(`dry run ${dry} of v${other} on ${base.slot_key}: ${run.state}`, 'waiting');
      await new Promise(resolve => setTimeout(resolve, POLL_MS));
    }
    const [before, after] = base.version === a ? [base.id, dry] : [dry, base.id];
    const frame = comparisonFrame(before, after);
    frame.addClass('nbcast-VersionCompare');
    content.insertWidget(content.widgets.indexOf(bar) + 1, frame);
    say(`v${a} (run ${before}) → v${b} (run ${after}) on ${base.slot_key}`, 'done');
  } catch (e) {
    say(e instanceof Error ? e.message : String(e), 'failed');
  }
}
