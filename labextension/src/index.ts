/**
 * The "GPU jobs" side panel: every gpujobs job on the configured backend, active first, then
 * recent; per job its phase, queue position and reason, expected start, gang k/N and progress;
 * actions: logs (a main-area tab), cancel (confirmed), attach (into the active notebook), copy id.
 *
 * Once the panel is first shown, the page follows one server-sent event stream
 * (GET gpujobs/api/events) fed by the server's shared refresh loop: no per-job polling.
 */
import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Clipboard, Dialog, MainAreaWidget, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ServerConnection } from '@jupyterlab/services';
import { LabIcon } from '@jupyterlab/ui-components';
import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import '../style/index.css';

export interface IProgress {
  step: number;
  total: number | null;
  fraction: number | null;
  rate: number | null;
  expected_end: number | null;
  text: string;
}

export interface IJobRow {
  job_id: string;
  name: string;
  backend: string;
  queue: string;
  phase: string;
  terminal: boolean;
  queue_position: number | null;
  position: string;
  reason: string;
  expected_start: number | null;
  not_before: number | null;
  expected_start_range: [number, number] | null;
  start: string; // the server's words: 'starts in ~12 min (14:05), between 14:02 and 14:40'
  progress: IProgress | null;
  gang_ready: number;
  gang_size: number;
  stalled: boolean;
  stale: string; // 'not current: no news from the cluster since …' while the backend cannot be read, else ''
  util: number[]; // recent mean utilisation points (percent), oldest first
  util_kind: string; // 'GPU', 'CPU' (ranks on CPU) or ''
  message: string;
  blocked_by: string[];
  submitted_at: number | null;
  finished_at: number | null;
}

const ICON = new LabIcon({
  name: 'gpujobs:panel',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24"><g class="jp-icon3" fill="#616161">' +
    '<path d="M4 6h16v12H4zM2 9h2v2H2zm0 4h2v2H2zm18-4h2v2h-2zm0 4h2v2h-2zM7 9v6h4V9zm6 0v6h4V9z"/></g></svg>'
});

const RECENT_SHOWN = 30;

function api(path: string): string {
  const settings = ServerConnection.makeSettings();
  return URLExt.join(settings.baseUrl, 'gpujobs/api', path);
}

async function request(path: string, init: RequestInit = {}): Promise<Response> {
  const settings = ServerConnection.makeSettings();
  const response = await ServerConnection.makeRequest(api(path), init, settings);
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try {
      const body = await response.json();
      message = body.message || message;
    } catch (e) {
      // not JSON: keep the status line
    }
    throw new Error(message);
  }
  return response;
}

/** The jobs, kept current from the event stream. */
class JobModel {
  readonly changed = new Signal<this, IJobRow[]>(this);
  jobs = new Map<string, IJobRow>();
  order: string[] = []; // the server's panel order (running, queued by position, recent)
  connected = false;
  error = '';
  private source: EventSource | null = null;

  start(): void {
    if (this.source) {
      return;
    }
    const settings = ServerConnection.makeSettings();
    let url = api('events');
    if (settings.token) {
      url += `?token=${encodeURIComponent(settings.token)}`;
    }
    const source = new EventSource(url, { withCredentials: true });
    this.source = source;
    source.addEventListener('snapshot', (ev: MessageEvent) => {
      const rows: IJobRow[] = JSON.parse(ev.data);
      this.jobs = new Map(rows.map(r => [r.job_id, r]));
      this.order = rows.map(r => r.job_id);
      this.connected = true;
      this.error = '';
      this.changed.emit(rows);
    });
    source.addEventListener('changes', (ev: MessageEvent) => {
      const diff: { upsert: IJobRow[]; removed: string[]; order: string[] } = JSON.parse(ev.data);
      for (const row of diff.upsert) {
        this.jobs.set(row.job_id, row);
      }
      for (const id of diff.removed) {
        this.jobs.delete(id);
      }
      this.order = diff.order;
      this.changed.emit(diff.upsert);
    });
    source.addEventListener('error', (ev: Event) => {
      const data = (ev as MessageEvent).data;
      this.error = data ? JSON.parse(data).message : 'reconnecting…';
      this.connected = false;
      this.changed.emit([]);
    });
  }

  ordered(): { active: IJobRow[]; recent: IJobRow[] } {
    const rows = this.order.map(id => this.jobs.get(id)).filter((r): r is IJobRow => r !== undefined);
    const active = rows.filter(r => !r.terminal);
    const recent = rows.filter(r => r.terminal);
    return { active, recent: recent.slice(0, RECENT_SHOWN) };
  }
}

/** A job's logs in a main-area tab, re-read whenever the job changes (rank filter on top). */
class LogsView extends Widget {
  private pre = document.createElement('pre');
  private rank = document.createElement('select');
  private pending = false;

  constructor(private jobId: string, model: JobModel) {
    super();
    this.addClass('gpujobs-logs');
    this.addClass('gpujobs-logview');
    this.id = `gpujobs-logs-${jobId.replace(/[^A-Za-z0-9_-]/g, '-')}`;
    const bar = document.createElement('div');
    bar.className = 'gpujobs-logs-bar';
    const label = document.createElement('span');
    label.textContent = `logs of ${jobId}`;
    this.rank.innerHTML = '<option value="">all ranks</option>';
    this.rank.addEventListener('change', () => void this.load());
    bar.append(label, this.rank);
    this.node.append(bar, this.pre);
    model.changed.connect((_, rows) => {
      if (rows.some(r => r.job_id === this.jobId)) {
        void this.load();
      }
    }, this);
    const row = model.jobs.get(jobId);
    for (let r = 0; r < (row?.gang_size ?? 0); r++) {
      const opt = document.createElement('option');
      opt.value = String(r);
      opt.textContent = `rank ${r}`;
      this.rank.append(opt);
    }
    void this.load();
  }

  async load(): Promise<void> {
    if (this.pending || this.isDisposed) {
      return;
    }
    this.pending = true;
    try {
      const q = this.rank.value ? `?rank=${this.rank.value}` : '';
      const response = await request(`jobs/${encodeURIComponent(this.jobId)}/logs${q}`);
      const text = await response.text();
      const atEnd = this.pre.scrollTop + this.pre.clientHeight >= this.pre.scrollHeight - 4;
      this.pre.textContent = text || '(no output yet)';
      if (atEnd) {
        this.pre.scrollTop = this.pre.scrollHeight;
      }
    } catch (e) {
      this.pre.textContent = `could not read the logs: ${(e as Error).message}`;
    } finally {
      this.pending = false;
    }
  }
}

/** A running job's live Python stacks per rank, in a main-area tab (re-read with the button). */
class StacksView extends Widget {
  private pre = document.createElement('pre');

  constructor(private jobId: string) {
    super();
    this.addClass('gpujobs-logs');
    this.addClass('gpujobs-stacks');
    const bar = document.createElement('div');
    bar.className = 'gpujobs-logs-bar';
    const label = document.createElement('span');
    label.textContent = `stacks of ${jobId}`;
    const again = document.createElement('button');
    again.textContent = 'refresh';
    again.addEventListener('click', () => void this.load());
    bar.append(label, again);
    this.node.append(bar, this.pre);
    void this.load();
  }

  async load(): Promise<void> {
    this.pre.textContent = 'asking the ranks…';
    try {
      const response = await request(`jobs/${encodeURIComponent(this.jobId)}/stacks`);
      const stacks: { [rank: string]: string } = await response.json();
      this.pre.textContent = Object.entries(stacks)
        .map(([rank, text]) => `== rank ${rank} ==\n${text}`)
        .join('\n');
    } catch (e) {
      this.pre.textContent = `no stacks: ${(e as Error).message}`;
    }
  }
}

/** An inline SVG line of utilisation points (0-100 %). */
function sparkline(points: number[], kind: string): HTMLElement {
  const box = document.createElement('div');
  box.className = 'gpujobs-spark';
  const w = 120;
  const h = 18;
  const line = points.length > 1 ? points : [points[0], points[0]];
  const step = w / (line.length - 1);
  const coords = line
    .map((p, i) => `${(i * step).toFixed(1)},${(h - (Math.max(0, Math.min(100, p)) / 100) * h).toFixed(1)}`)
    .join(' ');
  box.innerHTML =
    `<svg width="${w}" height="${h}" viewBox="0 0 ${w} ${h}"><polyline fill="none" stroke="#1a73e8" ` +
    `stroke-width="1.5" points="${coords}"/></svg>`;
  const label = document.createElement('span');
  label.textContent = ` ${kind} ${Math.round(points[points.length - 1])}%`;
  box.append(label);
  return box;
}

class JobsPanel extends Widget {
  private list = document.createElement('div');
  private status = document.createElement('span');

  constructor(
    private model: JobModel,
    private actions: {
      logs: (row: IJobRow) => void;
      stacks: (row: IJobRow) => void;
      attach: (row: IJobRow) => void;
    }
  ) {
    super();
    this.id = 'gpujobs-panel';
    this.addClass('gpujobs-panel');
    this.title.icon = ICON;
    this.title.caption = 'GPU jobs';
    const header = document.createElement('div');
    header.className = 'gpujobs-panel-header';
    const title = document.createElement('span');
    title.textContent = 'GPU jobs';
    this.status.className = 'gpujobs-panel-status';
    header.append(title, this.status);
    this.node.append(header, this.list);
    model.changed.connect(() => this.render(), this);
    this.render();
  }

  /** Follow the stream from the first time the panel is shown (a closed panel costs nothing). */
  protected onAfterShow(): void {
    this.model.start();
  }

  private render(): void {
    const { active, recent } = this.model.ordered();
    this.status.textContent = this.model.error
      ? this.model.error
      : this.model.connected
        ? `${active.length} active`
        : 'connecting…';
    this.list.replaceChildren(
      this.section('Active', active, 'no active jobs'),
      this.queues(active),
      this.section('Recent', recent, 'no finished jobs')
    );
  }

  /** Per queue with waiting jobs: a table of position, job, start and what it waits behind. */
  private queues(active: IJobRow[]): HTMLElement {
    const box = document.createElement('div');
    box.className = 'gpujobs-section gpujobs-section-queues';
    const byQueue = new Map<string, IJobRow[]>();
    for (const row of active.filter(r => r.phase === 'queued')) {
      const key = `${row.backend}/${row.queue || '(none)'}`;
      byQueue.set(key, [...(byQueue.get(key) ?? []), row]);
    }
    if (byQueue.size === 0) {
      return box;
    }
    const head = document.createElement('div');
    head.className = 'gpujobs-section-title';
    head.textContent = 'Queues';
    box.append(head);
    for (const [key, rows] of byQueue) {
      const table = document.createElement('table');
      table.className = 'gpujobs-queue-table';
      table.dataset.queue = key;
      const caption = table.createCaption();
      caption.textContent = `${key}: ${rows.length} waiting`;
      const header = table.createTHead().insertRow();
      for (const name of ['#', 'job', 'START', 'behind']) {
        const th = document.createElement('th');
        th.textContent = name;
        header.append(th);
      }
      const body = table.createTBody();
      for (const row of rows) {
        const tr = body.insertRow();
        tr.dataset.jobId = row.job_id;
        const cells = [
          row.queue_position === null ? '?' : String(row.queue_position),
          row.name || row.job_id,
          row.start.replace(/^starts /, ''),
          row.blocked_by.join(', ')
        ];
        for (const text of cells) {
          tr.insertCell().textContent = text;
        }
      }
      box.append(table);
    }
    return box;
  }

  private section(title: string, rows: IJobRow[], empty: string): HTMLElement {
    const box = document.createElement('div');
    box.className = `gpujobs-section gpujobs-section-${title.toLowerCase()}`;
    const head = document.createElement('div');
    head.className = 'gpujobs-section-title';
    head.textContent = title;
    box.append(head);
    if (rows.length === 0) {
      const note = document.createElement('div');
      note.className = 'gpujobs-empty';
      note.textContent = empty;
      box.append(note);
    }
    for (const row of rows) {
      box.append(this.row(row));
    }
    return box;
  }

  private row(row: IJobRow): HTMLElement {
    const el = document.createElement('div');
    el.className = 'gpujobs-row';
    el.dataset.jobId = row.job_id;
    el.dataset.phase = row.phase;
    const head = document.createElement('div');
    head.className = 'gpujobs-row-head';
    const name = document.createElement('span');
    name.className = 'gpujobs-row-name';
    name.textContent = row.name || row.job_id;
    name.title = row.job_id;
    const phase = document.createElement('span');
    phase.className = 'gpujobs-row-phase';
    phase.dataset.phase = row.phase;
    phase.textContent = row.phase;
    head.append(name, phase);
    const id = document.createElement('div');
    id.className = 'gpujobs-row-id';
    id.textContent = `${row.job_id} · ${row.backend}${row.queue ? ' · ' + row.queue : ''}`;
    el.append(head, id);

    const details: string[] = [];
    if (row.gang_size) {
      details.push(`gang ${row.gang_ready}/${row.gang_size}`);
    }
    if (row.phase === 'queued') {
      if (row.position) {
        details.push(row.position);
      }
      if (row.reason) {
        details.push(row.reason);
      }
      if (row.start) {
        details.push(row.start);
      }
    } else if (row.terminal && row.message) {
      details.push(row.message);
    }
    if (row.progress) {
      details.push(row.progress.text);
    }
    const detail = document.createElement('div');
    detail.className = 'gpujobs-row-detail';
    detail.textContent = details.join(' · ');
    el.append(detail);
    if (row.stalled) {
      const stalled = document.createElement('div');
      stalled.className = 'gpujobs-row-stalled';
      stalled.textContent = 'stalled';
      el.append(stalled);
    }
    if (row.stale) {
      const stale = document.createElement('div');
      stale.className = 'gpujobs-row-stale';
      stale.textContent = row.stale;
      el.append(stale);
    }
    if (row.progress && row.progress.fraction !== null) {
      const bar = document.createElement('div');
      bar.className = 'gpujobs-bar';
      const fill = document.createElement('div');
      fill.className = 'gpujobs-bar-fill';
      fill.style.width = `${Math.round(100 * row.progress.fraction)}%`;
      bar.append(fill);
      el.append(bar);
    }
    if (!row.terminal && row.util && row.util.length) {
      el.append(sparkline(row.util, row.util_kind));
    }
    const actions = document.createElement('div');
    actions.className = 'gpujobs-row-actions';
    actions.append(this.button('logs', () => this.actions.logs(row)));
    if (row.phase === 'running') {
      actions.append(this.button('stacks', () => this.actions.stacks(row)));
    }
    if (!row.terminal) {
      actions.append(this.button('cancel', () => void cancel(row)));
    }
    actions.append(this.button('attach', () => this.actions.attach(row)));
    actions.append(this.button('copy id', () => Clipboard.copyToSystem(row.job_id)));
    el.append(actions);
    return el;
  }

  private button(label: string, onClick: () => void): HTMLButtonElement {
    const b = document.createElement('button');
    b.className = `gpujobs-action-${label.replace(' ', '-')}`;
    b.textContent = label;
    b.addEventListener('click', onClick);
    return b;
  }
}

async function cancel(row: IJobRow): Promise<void> {
  const answer = await showDialog({
    title: 'Cancel GPU job',
    body: `Cancel ${row.name || row.job_id} (${row.job_id})? Its ranks are stopped.`,
    buttons: [Dialog.cancelButton({ label: 'Keep it' }), Dialog.warnButton({ label: 'Cancel job' })]
  });
  if (!answer.button.accept) {
    return;
  }
  try {
    await request(`jobs/${encodeURIComponent(row.job_id)}/cancel`, { method: 'POST' });
  } catch (e) {
    await showErrorMessage('Could not cancel the job', (e as Error).message);
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'gpujobs:panel',
  description: 'A side panel with my GPU jobs: status, queue, progress, logs, cancel, attach.',
  autoStart: true,
  optional: [INotebookTracker, ILayoutRestorer],
  activate: (app: JupyterFrontEnd, notebooks: INotebookTracker | null, restorer: ILayoutRestorer | null) => {
    const model = new JobModel();
    const logTabs = new Map<string, MainAreaWidget<LogsView>>();
    const showLogs = (row: IJobRow) => {
      let tab = logTabs.get(row.job_id);
      if (!tab || tab.isDisposed) {
        tab = new MainAreaWidget({ content: new LogsView(row.job_id, model) });
        tab.id = `gpujobs-logs-tab-${row.job_id.replace(/[^A-Za-z0-9_-]/g, '-')}`;
        tab.title.label = `Logs: ${row.name || row.job_id}`;
        tab.title.icon = ICON;
        tab.title.closable = true;
        logTabs.set(row.job_id, tab);
        app.shell.add(tab, 'main');
      }
      app.shell.activateById(tab.id);
    };
    const attach = (row: IJobRow) => {
      const line = `job = gpujobs.attach(${JSON.stringify(row.job_id)})`;
      const cell = notebooks?.activeCell;
      if (!cell) {
        void showErrorMessage('No active notebook', `Open a notebook and select a cell to insert:\n${line}`);
        return;
      }
      const shared = cell.model.sharedModel;
      const source = shared.getSource();
      const prefix = source.includes('import gpujobs') ? '' : 'import gpujobs\n';
      shared.setSource(source.trim() ? `${source}\n${prefix}${line}` : `${prefix}${line}`);
    };
    const showStacks = (row: IJobRow) => {
      const tab = new MainAreaWidget({ content: new StacksView(row.job_id) });
      tab.id = `gpujobs-stacks-tab-${row.job_id.replace(/[^A-Za-z0-9_-]/g, '-')}-${Date.now()}`;
      tab.title.label = `Stacks: ${row.name || row.job_id}`;
      tab.title.icon = ICON;
      tab.title.closable = true;
      app.shell.add(tab, 'main');
      app.shell.activateById(tab.id);
    };
    const panel = new JobsPanel(model, { logs: showLogs, stacks: showStacks, attach });
    app.shell.add(panel, 'left', { rank: 900 });
    if (restorer) {
      restorer.add(panel, 'gpujobs-panel');
    }
    app.commands.addCommand('gpujobs:open-panel', {
      label: 'GPU jobs',
      execute: () => app.shell.activateById(panel.id)
    });
    if (panel.isVisible) {
      model.start();
    }
  }
};

export default plugin;
