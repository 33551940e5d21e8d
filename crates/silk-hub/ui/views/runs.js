// @ts-check
// Runs (`#/runs`) and one run (`#/runs/ID`): live state, progress, pages/s chart, controls,
// log tail, items, finished requests (the archive: filtered by outcome, failed ones requeued).

import { act, api, authHeaders, clearError, enc, errorOf, poll, showError } from '../api.js';
import { drawChart } from '../chart.js';
import { $, h, syncRows, table } from '../dom.js';
import { RUN_STATES, TERMINAL, badge, fmtBytes, fmtClock, fmtDuration, fmtInt, fmtRate, progressBar, rel, runLink, safeClass, shortId } from '../format.js';
import { pageHeader, runName, section, sortRuns } from './parts.js';

/** @typedef {import('../types.js').RunView} RunView */
/** @typedef {import('../types.js').ItemsPage} ItemsPage */
/** @typedef {import('../types.js').LogPage} LogPage */
/** @typedef {import('../types.js').RequestsPage} RequestsPage */
/** @typedef {import('../types.js').Requeued} Requeued */

const ITEMS_PREVIEW = 20;
const REQUESTS_PREVIEW = 50;
const LOG_KEEP = 1000;
const LEVELS = new Set(['trace', 'debug', 'info', 'warn', 'error']);
// --- runs

export function viewRuns(root, params) {
  const state = RUN_STATES.includes(params.get('state')) ? params.get('state') : '';
  const filter = h('select', { id: 'runs-filter', testid: 'runs-filter', 'aria-label': 'Filter by state' },
    h('option', { value: '' }, 'All states'),
    RUN_STATES.map((s) => h('option', { value: s, selected: s === state }, s)));
  filter.addEventListener('change', () => {
    location.hash = filter.value ? `#/runs?state=${enc(filter.value)}` : '#/runs';
  });
  const list = table('runs-table', ['Run', 'Job', 'State', { label: 'Progress', cls: 'col-progress' }, 'Items', 'Pages/s', 'Agents', 'Created', 'Took']);
  root.append(pageHeader('Runs', 'Newest first.', filter), section(null, list.el));
  return poll(async () => {
    const q = new URLSearchParams({ limit: '100' });
    if (state) q.set('state', state);
    let runs = sortRuns(await api('GET', `/api/v1/runs?${q}`));
    if (state) runs = runs.filter((r) => r.state === state);
    syncRows(list.tbody, runs, (r) => r.id, (r) => h('tr', { testid: 'run-row', data: { id: String(r.id) } },
      h('td', null, runLink(r)),
      h('td', null, runName(r), r.restart_of ? h('div', { class: 'muted small' }, 'restart') : null),
      h('td', null, badge(r.state)),
      h('td', { class: 'col-progress' }, progressBar(r)),
      h('td', { class: 'num' }, fmtInt(r.stats?.items)),
      h('td', { class: 'num' }, r.state === 'running' ? fmtRate(r.stats?.pages_per_s) : '—'),
      h('td', { class: 'num' }, fmtInt((r.agents || []).length)),
      h('td', null, rel(r.created_ms)),
      h('td', null, r.started_ms ? fmtDuration((r.finished_ms || Date.now()) - r.started_ms) : '—')));
    list.setEmpty(runs.length ? '' : state ? `No ${state} runs.` : 'No runs yet.');
  });
}

/** Reads a text/event-stream response body and calls `onEvent(name, data, id)` per event. */
async function readEventStream(body, onEvent) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let name = '';
  let data = [];
  let id = null;
  const line = (l) => {
    if (l === '') {
      if (data.length) onEvent(name || 'message', data.join('\n'), id);
      name = '';
      data = [];
      id = null;
      return;
    }
    if (l.startsWith(':')) return;
    const colon = l.indexOf(':');
    const key = colon < 0 ? l : l.slice(0, colon);
    let value = colon < 0 ? '' : l.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (key === 'event') name = value;
    else if (key === 'data') data.push(value);
    else if (key === 'id') id = value;
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let start = 0;
    for (let i = 0; i < buf.length; i += 1) {
      const c = buf[i];
      if (c !== '\n' && c !== '\r') continue;
      if (c === '\r' && i === buf.length - 1) break; // maybe \r\n split across chunks
      line(buf.slice(start, i));
      if (c === '\r' && buf[i + 1] === '\n') i += 1;
      start = i + 1;
    }
    buf = buf.slice(start);
  }
}

function delay(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(t);
      resolve();
    }, { once: true });
  });
}

export function viewRun(root, id) {
  const title = h('h1', null, 'Run');
  const state = badge('pending', 'run-state');
  const reason = h('p', { class: 'reason', testid: 'run-reason', hidden: true });
  const buttons = {
    pause: h('button', { type: 'button', class: 'btn', id: 'run-pause', testid: 'run-pause', disabled: true }, 'Pause'),
    resume: h('button', { type: 'button', class: 'btn', id: 'run-resume', testid: 'run-resume', disabled: true }, 'Resume'),
    cancel: h('button', { type: 'button', class: 'btn btn-danger', id: 'run-cancel', testid: 'run-cancel', disabled: true }, 'Cancel'),
    restart: h('button', { type: 'button', class: 'btn', id: 'run-restart', testid: 'run-restart', disabled: true }, 'Restart'),
  };
  const progressSlot = h('div', { class: 'progress-slot' });
  const stat = (key, label) => {
    const v = h('div', { class: 'stat-value', testid: `stat-${key}` }, '—');
    return { v, el: h('div', { class: 'stat' }, v, h('div', { class: 'stat-label' }, label)) };
  };
  const stats = {
    left: stat('left', 'left'),
    total: stat('total', 'total'),
    success: stat('success', 'succeeded'),
    failed: stat('failed', 'failed'),
    items: stat('items', 'items'),
    pps: stat('pps', 'pages / s'),
  };
  const details = h('dl', { class: 'details', testid: 'run-details' });
  const canvas = h('canvas', { class: 'chart', testid: 'run-chart', 'aria-label': 'Pages per second over time' });
  const logBox = h('div', { class: 'log', testid: 'run-log', tabindex: '0' });
  const logCount = h('span', { class: 'muted small', testid: 'run-log-count' });
  const logEmpty = h('div', { class: 'log-empty' }, 'No log lines yet.');
  logBox.append(logEmpty);
  const workers = table('run-workers', [{ label: 'Worker', cls: 'num' }, 'Agent', 'State', 'Exit', 'Why']);
  const programNote = h('span', { class: 'muted small mono', testid: 'run-program-note' });
  const programCard = h('section', { class: 'card', testid: 'run-program', hidden: true },
    h('div', { class: 'card-title-row' }, h('h2', { class: 'card-title' }, 'Program workers'), programNote),
    workers.el);
  const items = table('run-items', ['#']);
  const itemsNote = h('span', { class: 'muted small' });
  const itemsRefresh = h('button', { type: 'button', class: 'btn btn-small btn-ghost', testid: 'run-items-refresh' }, 'Refresh');
  const reqs = table('run-requests', ['When', 'Outcome', { label: 'Status', cls: 'num' }, 'Error', { label: 'Attempts', cls: 'num' }, 'Agent', 'URL']);
  const reqOutcome = h('select', { id: 'run-requests-outcome', testid: 'run-requests-outcome', 'aria-label': 'Outcome' },
    ['failed', 'dropped', 'done', ''].map((o) => h('option', { value: o }, o || 'all')));
  const reqCounts = h('span', { class: 'muted small', testid: 'run-requests-counts' });
  const reqRefresh = h('button', { type: 'button', class: 'btn btn-small btn-ghost', testid: 'run-requests-refresh' }, 'Refresh');
  const requeue = h('button', { type: 'button', class: 'btn btn-small', testid: 'run-requeue', disabled: true }, 'Requeue failed');
  const requeued = h('p', { class: 'muted small', testid: 'run-requeued', hidden: true });

  root.append(
    h('div', { class: 'crumbs' }, h('a', { href: '#/runs' }, 'Runs'), ' / ', h('span', { class: 'mono', testid: 'run-id' }, id)),
    h('div', { class: 'page-header' },
      h('div', null, h('div', { class: 'title-row' }, title, state), h('p', { class: 'muted subtitle', testid: 'run-subtitle' })),
      h('div', { class: 'actions' }, buttons.pause, buttons.resume, buttons.cancel, buttons.restart)),
    reason,
    section(null, progressSlot, h('div', { class: 'stats' }, Object.values(stats).map((s) => s.el)), details),
    programCard,
    h('div', { class: 'grid-2' },
      section('Pages per second', canvas),
      h('section', { class: 'card' },
        h('div', { class: 'card-title-row' }, h('h2', { class: 'card-title' }, 'Log'), logCount),
        logBox)),
    h('section', { class: 'card' },
      h('div', { class: 'card-title-row' }, h('h2', { class: 'card-title' }, `Items (first ${ITEMS_PREVIEW})`), h('span', null, itemsNote, ' ', itemsRefresh)),
      items.el),
    h('section', { class: 'card', testid: 'run-requests-card' },
      h('div', { class: 'card-title-row' },
        h('h2', { class: 'card-title' }, `Finished requests (first ${REQUESTS_PREVIEW})`),
        h('div', { class: 'card-controls' }, reqCounts, reqOutcome, reqRefresh, requeue)),
      requeued,
      reqs.el),
  );

  let run = null;
  let stopped = false;
  const ctrl = new AbortController();
  const samples = [];
  let lastSample = null;
  let lastEventAt = 0;
  let lastLogId = null;
  let logLines = 0;
  let itemsShown = -1;
  let itemsAt = 0;
  let itemsBusy = false;

  function sample(view) {
    const t = Date.now();
    const success = view.stats?.success || 0;
    if (lastSample && t - lastSample.t >= 500) {
      const v = Math.max(0, (success - lastSample.success) / ((t - lastSample.t) / 1000));
      samples.push({ t, v });
      if (samples.length > 600) samples.shift();
      lastSample = { t, success };
    } else if (!lastSample) {
      lastSample = { t, success };
    }
  }

  function redrawChart() {
    const avg = run && run.state === 'running' ? run.stats?.pages_per_s ?? null : null;
    const live = !run || !TERMINAL.has(run.state);
    drawChart(canvas, samples, { avg, minSpan: live ? 30_000 : 0 });
  }

  /** @param {RunView} view */
  function applyRun(view) {
    const prevState = run?.state;
    run = view;
    lastEventAt = Date.now();
    document.title = `${runName(view)} · ${view.state} · Silk`;
    title.textContent = runName(view);
    state.className = `badge state-${safeClass(view.state)}`;
    state.textContent = view.state;
    const sub = [`run ${view.id}`, `strategy ${view.strategy}`];
    if (view.restart_of) sub.push(`restart of ${shortId(view.restart_of)}`);
    if (view.attempt) sub.push(`attempt ${view.attempt}`);
    $('[data-testid="run-subtitle"]', root).textContent = sub.join(' · ');
    reason.hidden = !view.reason;
    reason.textContent = view.reason || '';
    const s = view.stats || {};
    progressSlot.replaceChildren(progressBar(view, 'run-progress', true));
    stats.left.v.textContent = fmtInt(s.left);
    stats.total.v.textContent = fmtInt(s.total);
    stats.success.v.textContent = fmtInt(s.success);
    stats.failed.v.textContent = fmtInt(s.failed);
    stats.items.v.textContent = fmtInt(s.items);
    // While paused nothing is fetched; a finished run shows its average.
    stats.pps.v.textContent = fmtRate(view.state === 'paused' ? 0 : s.pages_per_s);
    const end = view.finished_ms || Date.now();
    const rows = [
      ['Job', view.job_id ? h('a', { href: `#/jobs/${enc(view.job_id)}` }, view.job_name || view.job_id) : 'ad-hoc'],
      // Start requests expanded from templates go into the frontier in batches.
      ...(view.expand ? [['Expanded', h('span', { testid: 'run-expanded' },
        `${fmtInt(view.expand.fed)} of ${fmtInt(view.expand.total)} start requests fed`)]] : []),
      ['Agents', (view.agents || []).length ? (view.agents || []).join(', ') : '—'],
      ['In flight', fmtInt(s.in_flight)],
      ['Pending', fmtInt(s.pending)],
      ['Dropped', fmtInt(s.dropped)],
      ['Retries', fmtInt(s.retries)],
      ['Duplicates', fmtInt(s.duplicates)],
      ['Downloaded', fmtBytes(s.bytes)],
      ['Created', fmtClock(view.created_ms)],
      ['Duration', view.started_ms ? fmtDuration(end - view.started_ms) : '—'],
    ];
    details.replaceChildren(...rows.flatMap(([k, v]) => [h('dt', null, k), h('dd', null, v)]));
    applyProgram(view.program);
    const st = view.state;
    buttons.pause.disabled = st !== 'running';
    buttons.resume.disabled = st !== 'paused';
    buttons.cancel.disabled = !['pending', 'allocating', 'running', 'paused'].includes(st);
    buttons.restart.disabled = ['pending', 'allocating', 'stopping'].includes(st);
    sample(view);
    redrawChart();
    const wantItems = (s.items || 0) > itemsShown && itemsShown < ITEMS_PREVIEW;
    if ((wantItems && Date.now() - itemsAt > 3000) || (TERMINAL.has(st) && prevState !== st)) loadItems();
    if (prevState === undefined || (TERMINAL.has(st) && prevState !== st)) loadRequests();
  }

  /** @param {import('../types.js').ProgramView|null|undefined} program */
  function applyProgram(program) {
    programCard.hidden = !program;
    if (!program) return;
    const spec = program.spec;
    programNote.textContent = `${spec.project} ${program.version} · ${spec.runtime || 'process'} · ${(spec.command || []).join(' ')}`;
    const list = program.workers || [];
    workers.setEmpty(list.length ? '' : 'Not placed yet.');
    syncRows(workers.tbody, list, (w) => w.worker, (w) => {
      const exit = w.signal != null ? `signal ${w.signal}` : w.exit_code != null ? String(w.exit_code) : '—';
      return h('tr', { testid: 'run-worker' },
        h('td', { class: 'num' }, String(w.worker)),
        h('td', { class: 'mono' }, w.agent),
        h('td', null, badge(w.state)),
        h('td', null, exit),
        h('td', { class: 'muted small' }, w.reason || ''));
    });
  }

  function appendLog(line) {
    if (!line || typeof line !== 'object') return;
    if (typeof line.id === 'number' || typeof line.id === 'string') {
      if (lastLogId !== null && Number(line.id) <= Number(lastLogId)) return; // seen (after a reconnect)
      lastLogId = line.id;
    }
    const stick = logBox.scrollHeight - logBox.scrollTop - logBox.clientHeight < 24;
    logEmpty.remove();
    const level = LEVELS.has(line.level) ? line.level : 'info';
    const ts = Number.isFinite(line.ts_ms) ? new Date(line.ts_ms) : null;
    logBox.append(h('div', { class: `log-line level-${level}`, testid: 'log-line' },
      h('span', { class: 'log-ts', title: ts ? ts.toISOString() : '' }, ts ? ts.toLocaleTimeString([], { hour12: false }) : ''),
      h('span', { class: 'log-level' }, level),
      h('span', { class: 'log-source' }, String(line.source ?? '')),
      h('span', { class: 'log-msg' }, String(line.message ?? ''))));
    logLines += 1;
    while (logBox.childElementCount > LOG_KEEP) logBox.firstElementChild.remove();
    logCount.textContent = `${fmtInt(logLines)} lines${logLines > LOG_KEEP ? ` (last ${LOG_KEEP} shown)` : ''}`;
    if (stick) logBox.scrollTop = logBox.scrollHeight;
  }

  async function loadItems() {
    if (itemsBusy || stopped) return;
    itemsBusy = true;
    itemsAt = Date.now();
    try {
      /** @type {ItemsPage} */
      const page = await api('GET', `/api/v1/runs/${enc(id)}/items?cursor=0&limit=${ITEMS_PREVIEW}`);
      const list = (page && Array.isArray(page.items) ? page.items : []).slice(0, ITEMS_PREVIEW);
      itemsShown = list.length;
      renderItems(list);
    } catch (e) {
      showError(e, 'items');
    } finally {
      itemsBusy = false;
    }
  }

  function renderItems(list) {
    const keys = [];
    for (const it of list) {
      if (!it || typeof it !== 'object') continue;
      for (const k of Object.keys(it)) if (!keys.includes(k)) keys.push(k);
    }
    keys.sort((a, b) => (a === 'url' ? -1 : b === 'url' ? 1 : 0));
    const cols = keys.slice(0, 6);
    const thead = $('thead tr', items.el);
    thead.replaceChildren(h('th', { class: 'num col-index' }, '#'), ...cols.map((k) => h('th', null, k)));
    items.tbody.replaceChildren(...list.map((it, i) => h('tr', { testid: 'item-row' },
      h('td', { class: 'num muted' }, String(i + 1)),
      ...cols.map((k) => {
        const v = it ? it[k] : undefined;
        const text = v === undefined || v === null ? '' : typeof v === 'string' ? v : JSON.stringify(v);
        return h('td', { class: 'clip', title: text }, text);
      }))));
    items.setEmpty(list.length ? '' : 'No items yet.');
    itemsNote.textContent = list.length ? `${list.length} shown` : '';
  }

  itemsRefresh.addEventListener('click', () => loadItems());

  let reqsBusy = false;
  async function loadRequests() {
    if (reqsBusy || stopped) return;
    reqsBusy = true;
    try {
      const q = new URLSearchParams({ limit: String(REQUESTS_PREVIEW) });
      if (reqOutcome.value) q.set('outcome', reqOutcome.value);
      /** @type {RequestsPage} */
      const page = await api('GET', `/api/v1/runs/${enc(id)}/requests?${q}`);
      const counts = page.counts || {}; // (a first page has them)
      const shown = Object.entries(counts).map(([k, n]) => `${k} ${fmtInt(n)}`);
      reqCounts.textContent = shown.length ? shown.join(' · ') : '';
      const failedLeft = reqOutcome.value === 'failed' ? (counts.failed || 0) : null;
      requeue.disabled = failedLeft === 0;
      reqs.tbody.replaceChildren(...(page.requests || []).map((r) => h('tr', { testid: 'request-row', data: { outcome: r.outcome } },
        h('td', null, rel(r.time_ms)),
        h('td', null, h('span', { class: `badge state-${r.outcome === 'done' ? 'succeeded' : r.outcome === 'failed' ? 'failed' : 'cancelled'}` }, r.outcome)),
        h('td', { class: 'num' }, r.status == null ? '—' : String(r.status)),
        h('td', { class: 'clip', title: r.error_msg || '' }, r.error_code || ''),
        h('td', { class: 'num' }, fmtInt(r.attempts)),
        h('td', null, r.agent || '—'),
        h('td', { class: 'clip mono', title: r.url }, r.url),
      )));
      reqs.setEmpty((page.requests || []).length ? '' : 'None archived (yet).');
    } catch (e) {
      showError(e, 'requests');
    } finally {
      reqsBusy = false;
    }
  }
  reqOutcome.addEventListener('change', () => loadRequests());
  reqRefresh.addEventListener('click', () => loadRequests());
  requeue.addEventListener('click', async () => {
    if (!window.confirm('Queue the failed requests of this run again (each once)?')) return;
    /** @type {Requeued|undefined} */
    const done = await act(requeue, () => api('POST', `/api/v1/runs/${enc(id)}/requests/requeue`, { outcome: 'failed' }));
    if (!done) return;
    requeued.hidden = false;
    requeued.replaceChildren(`${fmtInt(done.requeued)} request(s) queued again`,
      ...(done.run && done.run !== id ? [', into ', h('a', { href: `#/runs/${enc(done.run)}`, testid: 'run-requeued-into' }, shortId(done.run))] : []),
      ...(done.refused && done.refused.length ? [`; ${done.refused.length} not queued: ${done.refused.slice(0, 3).join('; ')}`] : []));
    loadRequests();
  });

  async function control(action, button, body) {
    const view = await act(button, () => api('POST', `/api/v1/runs/${enc(id)}/${action}`, body));
    if (!view) {
      if (run) applyRun(run); // buttons back to what the state allows
      return;
    }
    if (action === 'restart') {
      if (view.id) location.hash = `#/runs/${enc(view.id)}`;
      return;
    }
    applyRun(view);
  }
  buttons.pause.addEventListener('click', () => control('pause', buttons.pause));
  buttons.resume.addEventListener('click', () => control('resume', buttons.resume));
  buttons.cancel.addEventListener('click', () => {
    if (window.confirm('Cancel this run? Requests in flight finish; nothing new is sent.')) control('cancel', buttons.cancel);
  });
  buttons.restart.addEventListener('click', () => control('restart', buttons.restart, { keep_frontier: false }));

  // The event stream; on a drop it reconnects after the last log line seen. If the hub has no
  // event stream for us (an HTTP error), the page polls the run and its log instead.
  let ended = false;
  async function follow() {
    let backoff = 1000;
    while (!stopped && !ended) {
      const q = new URLSearchParams({ logs: 'true' });
      if (lastLogId !== null) q.set('after', String(lastLogId));
      let resp = null;
      try {
        resp = await fetch(`/api/v1/runs/${enc(id)}/events?${q}`, {
          headers: authHeaders({ Accept: 'text/event-stream' }),
          cache: 'no-store',
          signal: ctrl.signal,
        });
      } catch (e) {
        if (stopped) return;
        showError(new Error(`Lost the run's event stream (${e.message || e}); reconnecting…`), 'stream');
      }
      if (resp && !resp.ok) {
        const e = await errorOf(resp);
        if (e.silent || stopped) return;
        if (resp.status === 404 && !run) {
          showError(e, 'stream'); // no such run
          return;
        }
        pollFallback();
        return;
      }
      if (resp) {
        try {
          await readEventStream(resp.body, (name, data) => {
            clearError('stream');
            backoff = 1000;
            if (name === 'end') {
              ended = true; // its data is the final state; the run event before it has the rest
              return;
            }
            let payload;
            try {
              payload = JSON.parse(data);
            } catch {
              return;
            }
            if (name === 'run') applyRun(payload);
            else if (name === 'log') appendLog(payload);
          });
        } catch (e) {
          if (stopped) return;
          showError(new Error(`Lost the run's event stream (${e.message || e}); reconnecting…`), 'stream');
        }
      }
      if (stopped || ended) break;
      await delay(backoff, ctrl.signal);
      backoff = Math.min(backoff * 2, 10_000);
    }
    if (ended && !stopped) {
      clearError('stream');
      // One last read, in case the final event was missed between reconnects.
      try {
        applyRun(await api('GET', `/api/v1/runs/${enc(id)}`));
      } catch (e) {
        showError(e, 'stream');
      }
    }
  }

  let stopFallback = null;
  function pollFallback() {
    if (stopFallback) return;
    stopFallback = poll(async () => {
      applyRun(await api('GET', `/api/v1/runs/${enc(id)}`));
      const q = new URLSearchParams({ order: 'asc', limit: '200' });
      if (lastLogId !== null) q.set('after', String(lastLogId));
      try {
        /** @type {LogPage} */
        const page = await api('GET', `/api/v1/runs/${enc(id)}/logs?${q}`);
        for (const l of page?.lines || []) appendLog(l);
      } catch (e) {
        if (e.status !== 404) throw e;
      }
      if (TERMINAL.has(run.state)) {
        stopFallback();
      }
    });
  }

  // Between run events (which only come when something changed) the rate is zero: a ticker
  // extends the chart so that a pause shows as a drop, not as a gap.
  const ticker = setInterval(() => {
    if (!run || TERMINAL.has(run.state) || document.hidden) return;
    if (Date.now() - lastEventAt > 2500) {
      sample(run);
      redrawChart();
    }
  }, 1000);
  const onResize = () => redrawChart();
  window.addEventListener('resize', onResize);
  redrawChart();
  follow();

  return () => {
    stopped = true;
    ctrl.abort();
    clearInterval(ticker);
    window.removeEventListener('resize', onResize);
    if (stopFallback) stopFallback();
  };
}
