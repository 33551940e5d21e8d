// The Silk web UI: a single page app over the hub's REST API (`/api/v1`), hash-routed:
//   #/            dashboard (agents, runs in progress, recent runs)
//   #/jobs        jobs; #/jobs/new and #/jobs/ID are the job form (create, edit)
//   #/runs        runs, newest first (?state= filters)
//   #/runs/ID     one run: live state, progress, pages/s chart, controls, log tail, items
//   #/agents      the fleet
//
// Rules this file keeps: text from the API only ever reaches the page through textContent /
// text nodes (no HTML parsing of data); every request carries the bearer token; lists poll
// every 2 s and stop while the tab is hidden; a run page follows the run's event stream
// (fetch + stream reader, since EventSource cannot send an Authorization header).

const TOKEN_KEY = 'silk.token';
const POLL_MS = 2000;
const RUN_STATES = ['pending', 'allocating', 'running', 'paused', 'stopping', 'succeeded', 'failed', 'cancelled'];
const ACTIVE = new Set(['pending', 'allocating', 'running', 'paused', 'stopping']);
const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);
const LEVELS = new Set(['trace', 'debug', 'info', 'warn', 'error']);
const LOG_KEEP = 1000;
const ITEMS_PREVIEW = 20;

// ---------------------------------------------------------------------------------------------
// DOM helpers: elements are built from properties and children; strings become text nodes.

function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'testid') el.dataset.testid = v;
    else if (k === 'data') Object.assign(el.dataset, v);
    else if (k === 'text') el.textContent = String(v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (['value', 'checked', 'disabled', 'selected', 'hidden', 'required', 'readOnly'].includes(k)) el[k] = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  add(el, children);
  return el;
}

function add(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

function $(sel, root = document) {
  return root.querySelector(sel);
}

/** What each row was rendered from (rows are re-rendered only when it changes). */
const rowSigs = new WeakMap();

/** Keeps one `<tr>` per key in `tbody`, re-rendering a row only when its item changed. */
function syncRows(tbody, items, keyOf, render) {
  const old = new Map();
  for (const tr of tbody.children) old.set(tr.dataset.key, tr);
  let prev = null;
  for (const item of items) {
    const key = String(keyOf(item));
    const sig = JSON.stringify(item);
    let tr = old.get(key);
    if (!tr || rowSigs.get(tr) !== sig) {
      const fresh = render(item);
      fresh.dataset.key = key;
      rowSigs.set(fresh, sig);
      if (tr) tr.replaceWith(fresh);
      tr = fresh;
    }
    old.delete(key);
    const want = prev ? prev.nextSibling : tbody.firstChild;
    if (want !== tr) tbody.insertBefore(tr, want);
    prev = tr;
  }
  for (const tr of old.values()) tr.remove();
}

function table(testid, headers) {
  const tbody = h('tbody');
  const el = h('div', { class: 'table-wrap' },
    h('table', { class: 'table', testid },
      h('thead', null, h('tr', null, headers.map((x) => h('th', { class: x.cls || null }, x.label ?? x)))),
      tbody));
  const empty = h('p', { class: 'empty', hidden: true });
  el.append(empty);
  return {
    el,
    tbody,
    setEmpty(message) {
      empty.hidden = !message;
      empty.textContent = message || '';
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Formatting.

const intFmt = new Intl.NumberFormat('en-US');

function fmtInt(n) {
  return Number.isFinite(n) ? intFmt.format(Math.round(n)) : '—';
}

function fmtRate(x) {
  if (!Number.isFinite(x)) return '—';
  return x >= 100 ? intFmt.format(Math.round(x)) : x.toFixed(1);
}

function fmtBytes(n) {
  if (!Number.isFinite(n) || n <= 0) return n === 0 ? '0 B' : '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${i === 0 ? n : n.toFixed(n >= 100 ? 0 : 1)} ${units[i]}`;
}

function fmtDuration(ms) {
  if (!Number.isFinite(ms) || ms < 0) return '—';
  const s = ms / 1000;
  if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.round(s)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.round(s % 60)} s`;
  const hrs = Math.floor(m / 60);
  if (hrs < 48) return `${hrs} h ${m % 60} min`;
  return `${Math.floor(hrs / 24)} d ${hrs % 24} h`;
}

function fmtClock(ms) {
  if (!Number.isFinite(ms)) return '—';
  const d = new Date(ms);
  const time = d.toLocaleTimeString([], { hour12: false });
  return d.toDateString() === new Date().toDateString() ? time : `${d.toLocaleDateString()} ${time}`;
}

function relText(ms) {
  const d = ms - Date.now();
  const a = Math.abs(d);
  let t;
  if (a < 1500) return 'now';
  if (a < 60_000) t = `${Math.round(a / 1000)} s`;
  else if (a < 3_600_000) t = `${Math.round(a / 60_000)} min`;
  else if (a < 172_800_000) t = `${Math.round(a / 3_600_000)} h`;
  else t = `${Math.round(a / 86_400_000)} d`;
  return d < 0 ? `${t} ago` : `in ${t}`;
}

/** A relative time ("3 s ago", "in 4 min"), kept current by the clock below. */
function rel(ms, testid) {
  if (!Number.isFinite(ms)) return h('span', { class: 'muted', testid }, '—');
  return h('time', { class: 'rel', data: { ms: String(ms) }, title: fmtClock(ms), testid }, relText(ms));
}

setInterval(() => {
  if (document.hidden) return;
  for (const el of document.querySelectorAll('time.rel')) el.textContent = relText(Number(el.dataset.ms));
}, 1000);

function shortId(id) {
  const s = String(id ?? '');
  return s.length > 14 ? `${s.slice(0, 6)}…${s.slice(-6)}` : s;
}

function safeClass(s) {
  return String(s ?? 'unknown').toLowerCase().replace(/[^a-z0-9_-]/g, '') || 'unknown';
}

function badge(state, testid) {
  return h('span', { class: `badge state-${safeClass(state)}`, testid }, String(state ?? 'unknown'));
}

function runLink(run) {
  return h('a', { href: `#/runs/${encodeURIComponent(run.id)}`, class: 'mono', title: run.id }, shortId(run.id));
}

/** success + failed + dropped over total (dropped requests are finished too: robots.txt, off-site redirects). */
function progressOf(run) {
  const s = run.stats || {};
  const total = s.total || 0;
  const success = s.success || 0;
  const failed = s.failed || 0;
  const done = success + failed + (s.dropped || 0);
  let frac = total > 0 ? Math.min(1, done / total) : 0;
  if (run.state === 'succeeded' && (s.left || 0) === 0) frac = 1;
  return { frac, success, failed, total, done };
}

function progressBar(run, testid, big = false) {
  const p = progressOf(run);
  const pct = Math.floor(p.frac * 1000) / 10;
  const okW = p.total > 0 ? (p.frac * 100 * (p.done - p.failed)) / Math.max(p.done, 1) : p.frac * 100;
  const failW = p.frac * 100 - okW;
  const ok = h('div', { class: 'progress-ok' });
  const bad = h('div', { class: 'progress-failed' });
  ok.style.width = `${okW}%`;
  bad.style.width = `${failW}%`;
  return h('div', {
    class: `progress ${big ? 'progress-big' : ''} state-${safeClass(run.state)}`,
    testid,
    data: { percent: String(pct) },
    role: 'progressbar',
    'aria-valuemin': '0',
    'aria-valuemax': '100',
    'aria-valuenow': String(pct),
    title: `${fmtInt(p.success)} succeeded, ${fmtInt(p.failed)} failed, ${fmtInt(p.total)} total`,
  },
  h('div', { class: 'progress-track' }, ok, bad),
  h('span', { class: 'progress-label' }, `${pct}%`));
}

// ---------------------------------------------------------------------------------------------
// Token, API calls, the error line.

function getToken() {
  try {
    return localStorage.getItem(TOKEN_KEY) || '';
  } catch {
    return '';
  }
}

function setToken(token) {
  try {
    if (token) localStorage.setItem(TOKEN_KEY, token);
    else localStorage.removeItem(TOKEN_KEY);
  } catch {
    // Storage disabled: the token lives for this page only.
  }
  memoryToken = token;
  $('#sign-out').hidden = !token;
}

let memoryToken = '';

function token() {
  return getToken() || memoryToken;
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function authHeaders(extra) {
  const headers = { ...extra };
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  return headers;
}

async function errorOf(resp) {
  let code = 'http';
  let message = `${resp.status} ${resp.statusText || 'error'}`.trim();
  try {
    const body = await resp.json();
    if (body && typeof body.message === 'string' && body.message) {
      message = body.message;
      if (typeof body.code === 'string') code = body.code;
    }
  } catch {
    // Not JSON: the status line says it.
  }
  if (resp.status === 401) {
    showLogin(`The hub refused the token: ${message}`);
    const e = new ApiError(401, code, message);
    e.silent = true;
    return e;
  }
  return new ApiError(resp.status, code, message);
}

async function api(method, path, body) {
  const init = { method, headers: authHeaders({ Accept: 'application/json' }), cache: 'no-store' };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, 'network', `Cannot reach the hub (${e.message || e}).`);
  }
  if (!resp.ok) throw await errorOf(resp);
  if (resp.status === 204) return null;
  const text = await resp.text();
  return text ? JSON.parse(text) : null;
}

const enc = encodeURIComponent;

let errorSource = null;

function showError(e, source = 'action') {
  if (e && e.silent) return;
  const line = $('#error');
  line.textContent = e instanceof Error ? e.message : String(e);
  line.hidden = false;
  errorSource = source;
  if (source === 'poll') setLive(e && e.status === 0 ? 'offline' : 'error');
}

function clearError(source) {
  if (source && errorSource !== source) return;
  const line = $('#error');
  line.hidden = true;
  line.textContent = '';
  errorSource = null;
}

function setLive(state) {
  const el = $('#live');
  el.className = `live live-${state}`;
  el.textContent = state;
}

/** Calls `fn` now and every `ms` after it settles, except while the tab is hidden. */
function poll(fn, ms = POLL_MS) {
  let timer = null;
  let stopped = false;
  let busy = false;
  const tick = async () => {
    timer = null;
    if (stopped || busy) return;
    if (document.hidden) {
      setLive('paused');
      return;
    }
    busy = true;
    try {
      await fn();
      clearError('poll');
      setLive('live');
    } catch (e) {
      if (!stopped) showError(e, 'poll');
    }
    busy = false;
    if (!stopped && !document.hidden) timer = setTimeout(tick, ms);
  };
  const onVisibility = () => {
    if (stopped) return;
    if (document.hidden) {
      if (timer) clearTimeout(timer);
      timer = null;
      setLive('paused');
    } else if (!timer && !busy) {
      tick();
    }
  };
  document.addEventListener('visibilitychange', onVisibility);
  tick();
  return () => {
    stopped = true;
    if (timer) clearTimeout(timer);
    document.removeEventListener('visibilitychange', onVisibility);
  };
}

/** Runs an action from a button: disables it meanwhile, shows the API's message on failure. */
async function act(button, fn) {
  if (button) button.disabled = true;
  try {
    const out = await fn();
    clearError('action');
    return out;
  } catch (e) {
    showError(e);
    return undefined;
  } finally {
    if (button && button.isConnected) button.disabled = false;
  }
}

// ---------------------------------------------------------------------------------------------
// Charts, drawn on <canvas> by hand.

function cssVar(name, fallback) {
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return v || fallback;
}

function niceMax(x) {
  if (!(x > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(x));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= x) return m * p;
  return 10 * p;
}

function prepCanvas(canvas) {
  const dpr = window.devicePixelRatio || 1;
  const w = Math.max(1, canvas.clientWidth);
  const ht = Math.max(1, canvas.clientHeight);
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(ht * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(ht * dpr);
  }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, ht);
  return { ctx, w, h: ht };
}

/**
 * A time series chart: `points` are `{t, v}` (ms, value); `avg` an optional dashed level.
 * Axes: values on the left, clock time below; time runs from the first point over at least
 * `minSpan` ms, so that a live chart fills from the left.
 */
function drawChart(canvas, points, { avg = null, unit = '', minSpan = 30_000 } = {}) {
  if (!canvas.isConnected) return;
  const { ctx, w, h: ht } = prepCanvas(canvas);
  const accent = cssVar('--accent', '#2563eb');
  const grid = cssVar('--border', '#e5e7eb');
  const muted = cssVar('--muted', '#6b7280');
  const pad = { l: 48, r: 14, t: 14, b: 26 };
  const iw = w - pad.l - pad.r;
  const ih = ht - pad.t - pad.b;
  ctx.font = '11px system-ui, sans-serif';
  const maxV = niceMax(Math.max(1, avg || 0, ...points.map((p) => p.v)) * 1.1);
  const t0 = points.length ? points[0].t : Date.now();
  const last = points.length ? points[points.length - 1].t : t0;
  const span = Math.max(minSpan, last - t0, 1000);
  canvas.dataset.points = String(points.length);
  const x = (t) => pad.l + ((t - t0) / span) * iw;
  const y = (v) => pad.t + ih - (v / maxV) * ih;

  ctx.strokeStyle = grid;
  ctx.fillStyle = muted;
  ctx.lineWidth = 1;
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  for (let i = 0; i <= 4; i += 1) {
    const v = (maxV * i) / 4;
    const yy = Math.round(y(v)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(pad.l, yy);
    ctx.lineTo(w - pad.r, yy);
    ctx.stroke();
    ctx.fillText(`${Number.isInteger(maxV / 4) ? fmtInt(v) : fmtRate(v)}${unit}`, pad.l - 6, yy);
  }
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  const ticks = Math.max(2, Math.min(6, Math.floor(iw / 110)));
  for (let i = 0; i <= ticks; i += 1) {
    const t = t0 + (span * i) / ticks;
    const label = new Date(t).toLocaleTimeString([], { hour12: false, hour: '2-digit', minute: '2-digit', second: '2-digit' });
    ctx.fillText(label, Math.min(Math.max(x(t), pad.l + 24), w - pad.r - 24), pad.t + ih + 7);
  }

  if (points.length < 2) {
    ctx.textAlign = 'center';
    ctx.textBaseline = 'middle';
    ctx.fillText('waiting for data…', pad.l + iw / 2, pad.t + ih * 0.375);
    return;
  }
  const grad = ctx.createLinearGradient(0, pad.t, 0, pad.t + ih);
  grad.addColorStop(0, `${accent}55`);
  grad.addColorStop(1, `${accent}05`);
  ctx.beginPath();
  ctx.moveTo(x(points[0].t), y(0));
  for (const p of points) ctx.lineTo(x(p.t), y(p.v));
  ctx.lineTo(x(points[points.length - 1].t), y(0));
  ctx.closePath();
  ctx.fillStyle = grad;
  ctx.fill();
  ctx.beginPath();
  points.forEach((p, i) => (i ? ctx.lineTo(x(p.t), y(p.v)) : ctx.moveTo(x(p.t), y(p.v))));
  ctx.strokeStyle = accent;
  ctx.lineWidth = 2;
  ctx.lineJoin = 'round';
  ctx.stroke();
  if (avg !== null && avg > 0) {
    ctx.setLineDash([5, 4]);
    ctx.strokeStyle = muted;
    ctx.lineWidth = 1;
    ctx.beginPath();
    ctx.moveTo(pad.l, y(avg));
    ctx.lineTo(w - pad.r, y(avg));
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillStyle = muted;
    ctx.textAlign = 'right';
    ctx.textBaseline = 'bottom';
    ctx.fillText(`average ${fmtRate(avg)}${unit}`, w - pad.r - 2, y(avg) - 3);
  }
}

/** A sparkline: no axes, the last value's area. */
function drawSpark(canvas, values, color) {
  if (!canvas.isConnected) return;
  const { ctx, w, h: ht } = prepCanvas(canvas);
  if (values.length < 2) return;
  const max = niceMax(Math.max(1, ...values));
  const x = (i) => (i / (values.length - 1)) * (w - 2) + 1;
  const y = (v) => ht - 2 - (v / max) * (ht - 4);
  ctx.beginPath();
  ctx.moveTo(x(0), ht);
  values.forEach((v, i) => ctx.lineTo(x(i), y(v)));
  ctx.lineTo(x(values.length - 1), ht);
  ctx.closePath();
  ctx.fillStyle = `${color}22`;
  ctx.fill();
  ctx.beginPath();
  values.forEach((v, i) => (i ? ctx.lineTo(x(i), y(v)) : ctx.moveTo(x(i), y(v))));
  ctx.strokeStyle = color;
  ctx.lineWidth = 1.5;
  ctx.stroke();
}

// ---------------------------------------------------------------------------------------------
// Views. Each takes its container and route parameters and returns its cleanup function.

function pageHeader(title, subtitle, ...actions) {
  return h('div', { class: 'page-header' },
    h('div', null, h('h1', null, title), subtitle ? h('p', { class: 'muted subtitle' }, subtitle) : null),
    h('div', { class: 'actions' }, actions));
}

function section(title, ...children) {
  return h('section', { class: 'card' }, title ? h('h2', { class: 'card-title' }, title) : null, children);
}

function meter(frac, label, testid) {
  const fill = h('div', { class: 'meter-fill' });
  const f = Math.max(0, Math.min(1, frac || 0));
  fill.style.width = `${f * 100}%`;
  if (f > 0.85) fill.classList.add('meter-hot');
  return h('div', { class: 'meter-row', testid }, h('div', { class: 'meter' }, fill), h('span', { class: 'meter-label' }, label));
}

/** QPS history of the agents, kept while the page lives (the dashboard's sparklines). */
const agentHistory = new Map();

function recordAgents(agents) {
  const seen = new Set();
  for (const a of agents) {
    seen.add(a.id);
    const hist = agentHistory.get(a.id) || [];
    hist.push(Number(a.qps) || 0);
    if (hist.length > 60) hist.shift();
    agentHistory.set(a.id, hist);
  }
  for (const id of agentHistory.keys()) if (!seen.has(id)) agentHistory.delete(id);
}

function sortRuns(runs) {
  return [...runs].sort((a, b) => (b.created_ms || 0) - (a.created_ms || 0));
}

function runName(run) {
  return run.job_name || run.spider_name || '—';
}

function viewDashboard(root) {
  const tiles = h('div', { class: 'tiles' });
  const agentGrid = h('div', { class: 'agent-grid', testid: 'dashboard-agents' });
  const agentsEmpty = h('p', { class: 'empty', hidden: true }, 'No agents have registered yet.');
  const active = table('dashboard-runs', ['Run', 'Job', 'State', { label: 'Progress', cls: 'col-progress' }, 'Pages/s', 'Items', 'Started']);
  const recent = table('dashboard-recent', ['Run', 'Job', 'State', 'Items', 'Finished', 'Took']);
  root.append(
    pageHeader('Dashboard', 'The fleet and the work in progress, refreshed every 2 s.'),
    tiles,
    section('Agents', agentGrid, agentsEmpty),
    section('Runs in progress', active.el),
    section('Recently finished', recent.el),
  );
  const cards = new Map();

  function agentCard(a) {
    let card = cards.get(a.id);
    if (!card) {
      const spark = h('canvas', { class: 'spark' });
      card = {
        el: h('div', { class: 'agent-card', testid: 'agent-card', data: { id: String(a.id) } }),
        spark,
      };
      cards.set(a.id, card);
    }
    const memFrac = a.total_memory_bytes ? a.memory_bytes / a.total_memory_bytes : 0;
    card.el.replaceChildren(
      h('div', { class: 'agent-card-head' }, h('strong', { class: 'mono' }, a.id), badge(a.state)),
      h('div', { class: 'agent-card-sub muted' }, a.host ? `${a.host} · ` : '', `${fmtInt(a.cores)} cores · capacity ${fmtInt(a.capacity)}`),
      h('div', { class: 'kv' }, h('span', null, 'CPU'), meter((a.cpu_pct || 0) / 100, `${(a.cpu_pct || 0).toFixed(0)}%`)),
      h('div', { class: 'kv' }, h('span', null, 'Memory'), meter(memFrac, fmtBytes(a.memory_bytes))),
      h('div', { class: 'kv' }, h('span', null, 'QPS'), h('div', { class: 'spark-row' }, card.spark, h('span', { class: 'meter-label' }, fmtRate(a.qps)))),
    );
    return card;
  }

  const stop = poll(async () => {
    const [agents, runs] = await Promise.all([api('GET', '/api/v1/agents'), api('GET', '/api/v1/runs?limit=100')]);
    recordAgents(agents);
    const sorted = sortRuns(runs);
    const running = sorted.filter((r) => ACTIVE.has(r.state));
    const finished = sorted.filter((r) => TERMINAL.has(r.state)).slice(0, 8);
    const alive = agents.filter((a) => a.state === 'alive').length;
    const pps = running.reduce((s, r) => s + ((r.state === 'running' && r.stats?.pages_per_s) || 0), 0);
    const qps = agents.reduce((s, a) => s + (a.qps || 0), 0);
    tiles.replaceChildren(
      tile('Agents alive', `${alive} / ${agents.length}`, 'tile-agents'),
      tile('Runs in progress', fmtInt(running.length), 'tile-runs'),
      tile('Pages / s', fmtRate(pps), 'tile-pps'),
      tile('Fleet QPS', fmtRate(qps), 'tile-qps'),
    );

    const ids = new Set(agents.map((a) => a.id));
    for (const id of cards.keys()) if (!ids.has(id)) cards.delete(id);
    const sortedAgents = [...agents].sort((a, b) => String(a.id).localeCompare(String(b.id)));
    agentGrid.replaceChildren(...sortedAgents.map((a) => agentCard(a).el));
    agentsEmpty.hidden = agents.length > 0;
    for (const a of sortedAgents) drawSpark(cards.get(a.id).spark, agentHistory.get(a.id) || [], cssVar('--accent', '#2563eb'));

    syncRows(active.tbody, running, (r) => r.id, (r) => h('tr', { testid: 'dashboard-run', data: { id: String(r.id) } },
      h('td', null, runLink(r)),
      h('td', null, runName(r)),
      h('td', null, badge(r.state)),
      h('td', { class: 'col-progress' }, progressBar(r)),
      h('td', { class: 'num' }, r.state === 'running' ? fmtRate(r.stats?.pages_per_s) : '—'),
      h('td', { class: 'num' }, fmtInt(r.stats?.items)),
      h('td', null, rel(r.started_ms ?? r.created_ms))));
    active.setEmpty(running.length ? '' : 'No runs in progress. Trigger a job from the Jobs page.');
    syncRows(recent.tbody, finished, (r) => r.id, (r) => h('tr', null,
      h('td', null, runLink(r)),
      h('td', null, runName(r)),
      h('td', null, badge(r.state)),
      h('td', { class: 'num' }, fmtInt(r.stats?.items)),
      h('td', null, rel(r.finished_ms)),
      h('td', null, r.finished_ms && r.started_ms ? fmtDuration(r.finished_ms - r.started_ms) : '—')));
    recent.setEmpty(finished.length ? '' : 'No finished runs yet.');
  });
  return stop;
}

function tile(label, value, testid) {
  return h('div', { class: 'tile', testid }, h('div', { class: 'tile-value' }, value), h('div', { class: 'tile-label' }, label));
}

// --- jobs

function viewJobs(root) {
  const list = table('jobs-table', ['Name', 'Spider', 'Schedule', 'Next fire', 'Last run', 'Enabled', { label: '', cls: 'col-actions' }]);
  root.append(
    pageHeader('Jobs', 'Spiders with a schedule. Trigger one to start a run now.',
      h('a', { class: 'btn btn-primary', href: '#/jobs/new', testid: 'new-job' }, 'New job')),
    section(null, list.el),
  );

  function row(job) {
    const toggle = h('input', {
      type: 'checkbox',
      class: 'switch',
      checked: job.enabled !== false,
      testid: 'job-enabled',
      'aria-label': `Enable ${job.name}`,
    });
    toggle.addEventListener('change', async () => {
      const want = toggle.checked;
      const out = await act(toggle, () => api('PATCH', `/api/v1/jobs/${enc(job.id)}`, { enabled: want }));
      if (out === undefined) toggle.checked = !want;
      else refresh();
    });
    const trigger = h('button', { type: 'button', class: 'btn btn-small', testid: 'job-trigger' }, 'Trigger');
    trigger.addEventListener('click', async () => {
      const run = await act(trigger, () => api('POST', `/api/v1/jobs/${enc(job.id)}/runs`, { args: {} }));
      if (run && run.id) location.hash = `#/runs/${enc(run.id)}`;
    });
    const schedule = job.cron
      ? h('span', null, h('code', null, job.cron), job.timezone ? h('span', { class: 'muted' }, ` ${job.timezone}`) : null)
      : h('span', { class: 'muted' }, 'by hand');
    return h('tr', { testid: 'job-row', data: { name: String(job.name), id: String(job.id) } },
      h('td', null, h('a', { href: `#/jobs/${enc(job.id)}`, class: 'strong', testid: 'job-edit' }, job.name),
        job.remarks ? h('div', { class: 'muted small clip' }, job.remarks) : null),
      h('td', null, job.spider_name || '—'),
      h('td', null, schedule),
      h('td', null, job.enabled === false ? h('span', { class: 'muted' }, 'disabled') : rel(job.next_fire_ms)),
      h('td', null, job.last_run ? h('a', { href: `#/runs/${enc(job.last_run.id)}`, class: 'badge-link' }, badge(job.last_run.state)) : h('span', { class: 'muted' }, 'never')),
      h('td', null, h('label', { class: 'switch-wrap' }, toggle)),
      h('td', { class: 'col-actions' }, trigger));
  }

  async function refresh() {
    const jobs = await api('GET', '/api/v1/jobs');
    const sorted = [...jobs].sort((a, b) => String(a.name).localeCompare(String(b.name)));
    syncRows(list.tbody, sorted, (j) => j.id, row);
    list.setEmpty(sorted.length ? '' : 'No jobs yet. Create one with “New job”.');
  }
  return poll(refresh);
}

function field(label, input, hint) {
  return h('label', { class: 'field' }, h('span', null, label), input, hint ? h('small', { class: 'muted' }, hint) : null);
}

function viewJobForm(root, id) {
  const editing = id !== null;
  const f = {
    name: h('input', { type: 'text', id: 'job-name', testid: 'job-name', required: true, autocomplete: 'off', spellcheck: 'false', placeholder: 'shop' }),
    spider: h('textarea', { id: 'job-spider', testid: 'job-spider', rows: '16', required: true, spellcheck: 'false', class: 'mono', placeholder: 'name: shop\nstart_urls:\n  - https://example.com/\n' }),
    cron: h('input', { type: 'text', id: 'job-cron', testid: 'job-cron', autocomplete: 'off', spellcheck: 'false', class: 'mono', placeholder: '*/5 * * * *' }),
    timezone: h('input', { type: 'text', id: 'job-timezone', testid: 'job-timezone', autocomplete: 'off', spellcheck: 'false', placeholder: 'UTC', list: 'timezones' }),
    remarks: h('textarea', { id: 'job-remarks', testid: 'job-remarks', rows: '2' }),
    overlap: h('select', { id: 'job-overlap', testid: 'job-overlap' },
      h('option', { value: 'skip' }, 'skip — a fire while a run is active is skipped'),
      h('option', { value: 'queue' }, 'queue — it starts when the active run ends'),
      h('option', { value: 'replace' }, 'replace — the active run is cancelled')),
    strategy: h('input', { type: 'text', id: 'job-strategy', testid: 'job-strategy', autocomplete: 'off', spellcheck: 'false', placeholder: 'random', class: 'mono' }),
    args: h('textarea', { id: 'job-args', testid: 'job-args', rows: '2', class: 'mono', spellcheck: 'false', placeholder: '{"category": "books"}' }),
    enabled: h('input', { type: 'checkbox', id: 'job-enabled', testid: 'job-enabled-input', class: 'switch', checked: true }),
  };
  const zones = h('datalist', { id: 'timezones' });
  try {
    for (const z of Intl.supportedValuesOf('timeZone')) zones.append(h('option', { value: z }));
  } catch {
    // Older browsers: free text only.
  }
  const save = h('button', { type: 'submit', class: 'btn btn-primary', id: 'job-save', testid: 'job-save' }, editing ? 'Save changes' : 'Create job');
  const del = editing ? h('button', { type: 'button', class: 'btn btn-danger', testid: 'job-delete' }, 'Delete job') : null;
  const form = h('form', { class: 'card form', testid: 'job-form', novalidate: true },
    h('div', { class: 'form-grid' },
      field('Name', f.name, 'Unique among the jobs.'),
      field('Schedule (cron)', f.cron, 'Five fields; empty: triggered by hand only.'),
      field('Time zone', f.timezone, 'IANA name, e.g. Europe/Paris; empty: UTC.'),
      field('Overlap', f.overlap, 'What a fire does while a run of this job is active.'),
      field('Strategy', f.strategy, 'random, fixed:N or chained:N; empty: random.'),
      h('label', { class: 'field field-inline' }, f.enabled, h('span', null, 'Enabled (fires on schedule)'))),
    field('Spider (YAML)', f.spider, 'Paste the spider file; ${args.NAME} placeholders are filled at trigger time.'),
    h('div', { class: 'form-grid' },
      field('Args (JSON object)', f.args, 'Optional; merged under the args of a trigger.'),
      field('Remarks', f.remarks)),
    h('div', { class: 'form-actions' },
      del,
      h('span', { class: 'spacer' }),
      h('a', { class: 'btn btn-ghost', href: '#/jobs', testid: 'job-cancel' }, 'Cancel'),
      save),
    zones);
  const runsList = table('job-runs', ['Run', 'State', { label: 'Progress', cls: 'col-progress' }, 'Items', 'Created']);
  const runsSection = editing ? section('Recent runs of this job', runsList.el) : null;
  add(root, [
    h('div', { class: 'crumbs' }, h('a', { href: '#/jobs' }, 'Jobs'), ' / ', editing ? 'Edit' : 'New'),
    pageHeader(editing ? 'Edit job' : 'New job', editing ? null : 'A job runs a spider by hand or on a schedule.'),
    form,
    runsSection,
  ]);

  let original = null;
  function fill(job) {
    original = job;
    f.name.value = job.name || '';
    f.spider.value = job.spider || '';
    f.cron.value = job.cron || '';
    f.timezone.value = job.timezone || '';
    f.remarks.value = job.remarks || '';
    f.overlap.value = job.overlap || 'skip';
    f.strategy.value = job.strategy || '';
    f.args.value = job.args && Object.keys(job.args).length ? JSON.stringify(job.args, null, 2) : '';
    f.enabled.checked = job.enabled !== false;
    $('h1', root).textContent = `Edit job ${job.name}`;
  }

  function spec() {
    const text = (el) => el.value.trim();
    const opt = (el) => text(el) || null;
    let args = null;
    if (text(f.args)) {
      try {
        args = JSON.parse(f.args.value);
      } catch (e) {
        throw new Error(`Args: not valid JSON (${e.message}).`);
      }
      if (!args || typeof args !== 'object' || Array.isArray(args)) throw new Error('Args: must be a JSON object.');
    }
    if (!text(f.name)) throw new Error('Name: required.');
    if (!text(f.spider)) throw new Error('Spider: paste the spider YAML.');
    const body = {
      name: text(f.name),
      spider: f.spider.value,
      cron: opt(f.cron),
      timezone: opt(f.timezone),
      remarks: opt(f.remarks),
      overlap: f.overlap.value,
      strategy: opt(f.strategy),
      args,
      enabled: f.enabled.checked,
    };
    if (!editing) {
      // A new job sends only what is set; an edit sends null to clear.
      for (const k of Object.keys(body)) if (body[k] === null) delete body[k];
    } else if (original) {
      // An edit sends what changed (a merge patch): "", {} and null all mean "not set".
      const norm = (v) => (v === undefined || v === '' || (v && typeof v === 'object' && !Object.keys(v).length) ? null : v);
      for (const k of Object.keys(body)) {
        if (JSON.stringify(norm(original[k])) === JSON.stringify(norm(body[k]))) delete body[k];
      }
    }
    return body;
  }

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    let body;
    try {
      body = spec();
    } catch (e) {
      showError(e);
      return;
    }
    const job = await act(save, () => (editing
      ? api('PATCH', `/api/v1/jobs/${enc(id)}`, body)
      : api('POST', '/api/v1/jobs', body)));
    if (job) location.hash = '#/jobs';
  });
  if (del) {
    del.addEventListener('click', async () => {
      const name = original ? original.name : id;
      if (!window.confirm(`Delete job ${name}? Its runs stay.`)) return;
      const out = await act(del, () => api('DELETE', `/api/v1/jobs/${enc(id)}`));
      if (out !== undefined) location.hash = '#/jobs';
    });
  }

  if (!editing) {
    f.name.focus();
    return () => {};
  }
  let loaded = false;
  return poll(async () => {
    if (!loaded) {
      fill(await api('GET', `/api/v1/jobs/${enc(id)}`));
      loaded = true;
    }
    const runs = sortRuns(await api('GET', `/api/v1/jobs/${enc(id)}/runs?limit=10`));
    syncRows(runsList.tbody, runs, (r) => r.id, (r) => h('tr', null,
      h('td', null, runLink(r)),
      h('td', null, badge(r.state)),
      h('td', { class: 'col-progress' }, progressBar(r)),
      h('td', { class: 'num' }, fmtInt(r.stats?.items)),
      h('td', null, rel(r.created_ms))));
    runsList.setEmpty(runs.length ? '' : 'This job has not run yet.');
  });
}

// --- runs

function viewRuns(root, params) {
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

function viewRun(root, id) {
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
  const items = table('run-items', ['#']);
  const itemsNote = h('span', { class: 'muted small' });
  const itemsRefresh = h('button', { type: 'button', class: 'btn btn-small btn-ghost', testid: 'run-items-refresh' }, 'Refresh');

  root.append(
    h('div', { class: 'crumbs' }, h('a', { href: '#/runs' }, 'Runs'), ' / ', h('span', { class: 'mono', testid: 'run-id' }, id)),
    h('div', { class: 'page-header' },
      h('div', null, h('div', { class: 'title-row' }, title, state), h('p', { class: 'muted subtitle', testid: 'run-subtitle' })),
      h('div', { class: 'actions' }, buttons.pause, buttons.resume, buttons.cancel, buttons.restart)),
    reason,
    section(null, progressSlot, h('div', { class: 'stats' }, Object.values(stats).map((s) => s.el)), details),
    h('div', { class: 'grid-2' },
      section('Pages per second', canvas),
      h('section', { class: 'card' },
        h('div', { class: 'card-title-row' }, h('h2', { class: 'card-title' }, 'Log'), logCount),
        logBox)),
    h('section', { class: 'card' },
      h('div', { class: 'card-title-row' }, h('h2', { class: 'card-title' }, `Items (first ${ITEMS_PREVIEW})`), h('span', null, itemsNote, ' ', itemsRefresh)),
      items.el),
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
    const st = view.state;
    buttons.pause.disabled = st !== 'running';
    buttons.resume.disabled = st !== 'paused';
    buttons.cancel.disabled = !['pending', 'allocating', 'running', 'paused'].includes(st);
    buttons.restart.disabled = ['pending', 'allocating', 'stopping'].includes(st);
    sample(view);
    redrawChart();
    const wantItems = (s.items || 0) > itemsShown && itemsShown < ITEMS_PREVIEW;
    if ((wantItems && Date.now() - itemsAt > 3000) || (TERMINAL.has(st) && prevState !== st)) loadItems();
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

// --- agents

function viewAgents(root) {
  const list = table('agents-table', ['Agent', 'State', { label: 'CPU', cls: 'col-meter' }, { label: 'Memory', cls: 'col-meter' }, 'Downloaders', 'In flight', 'QPS', 'Last heartbeat', 'phi', 'Labels']);
  root.append(pageHeader('Agents', 'Downloader machines, as their heartbeats report them.'), section(null, list.el));
  return poll(async () => {
    const agents = await api('GET', '/api/v1/agents');
    recordAgents(agents);
    const sorted = [...agents].sort((a, b) => String(a.id).localeCompare(String(b.id)));
    syncRows(list.tbody, sorted, (a) => a.id, (a) => {
      const memFrac = a.total_memory_bytes ? a.memory_bytes / a.total_memory_bytes : 0;
      const labels = Object.entries(a.labels || {});
      return h('tr', { testid: 'agent-row', data: { id: String(a.id) } },
        h('td', null, h('div', { class: 'mono strong' }, a.id), h('div', { class: 'muted small' }, [a.host, a.version ? `v${a.version}` : null].filter(Boolean).join(' · '))),
        h('td', null, badge(a.state, 'agent-state')),
        h('td', { class: 'col-meter' }, meter((a.cpu_pct || 0) / 100, `${(a.cpu_pct || 0).toFixed(1)}%`)),
        h('td', { class: 'col-meter' }, meter(memFrac, fmtBytes(a.memory_bytes))),
        h('td', { class: 'num' }, fmtInt(a.active_downloaders)),
        h('td', { class: 'num' }, `${fmtInt(a.in_flight)} / ${fmtInt(a.capacity)}`),
        h('td', { class: 'num' }, fmtRate(a.qps)),
        h('td', null, rel(a.last_heartbeat_ms)),
        h('td', { class: 'num' }, Number.isFinite(a.phi) ? a.phi.toFixed(2) : '—'),
        h('td', null, labels.length ? labels.map(([k, v]) => h('span', { class: 'chip' }, `${k}=${v}`)) : h('span', { class: 'muted' }, '—')));
    });
    list.setEmpty(sorted.length ? '' : 'No agents have registered yet.');
  });
}

function viewNotFound(root) {
  root.append(pageHeader('Not found', 'There is no such page.'), h('p', null, h('a', { href: '#/' }, 'Back to the dashboard')));
  return () => {};
}

// ---------------------------------------------------------------------------------------------
// Routing, sign-in, start.

let cleanup = null;

function stopView() {
  if (cleanup) cleanup();
  cleanup = null;
}

function route() {
  stopView();
  clearError();
  const view = $('#view');
  view.replaceChildren();
  if (!$('#login').hidden) return;
  document.title = 'Silk';
  setLive('live');
  const raw = (location.hash || '#/').slice(1);
  const [path, query] = raw.split('?');
  const params = new URLSearchParams(query || '');
  let parts;
  try {
    parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  } catch {
    parts = ['?'];
  }
  const section = parts[0] || 'dashboard';
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.route === section);
  if (parts.length === 0) cleanup = viewDashboard(view);
  else if (section === 'jobs' && parts.length === 1) cleanup = viewJobs(view);
  else if (section === 'jobs' && parts.length === 2) cleanup = viewJobForm(view, parts[1] === 'new' ? null : parts[1]);
  else if (section === 'runs' && parts.length === 1) cleanup = viewRuns(view, params);
  else if (section === 'runs' && parts.length === 2) cleanup = viewRun(view, parts[1]);
  else if (section === 'agents' && parts.length === 1) cleanup = viewAgents(view);
  else cleanup = viewNotFound(view);
}

function showLogin(message) {
  setToken('');
  stopView();
  $('#view').replaceChildren();
  clearError();
  const msg = $('#login-message');
  msg.hidden = !message;
  msg.textContent = message || '';
  $('#login').hidden = false;
  $('#view').hidden = true;
  $('#live').hidden = true;
  $('#login-token').focus();
}

function hideLogin() {
  $('#login').hidden = true;
  $('#view').hidden = false;
  $('#live').hidden = false;
}

/** Takes the token from a `#token=…` link (as the hub prints it), then drops it from the URL. */
function takeTokenFromUrl() {
  const hash = location.hash.slice(1);
  if (!hash.startsWith('token=') && !hash.includes('&token=')) return;
  const params = new URLSearchParams(hash.startsWith('/') ? hash.split('?')[1] || '' : hash);
  const t = params.get('token');
  if (t) setToken(t.trim());
  history.replaceState(null, '', `${location.pathname}${location.search}#/`);
}

function start() {
  takeTokenFromUrl();
  $('#sign-out').hidden = !token();
  $('#login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = $('#login-token').value.trim();
    if (!t) return;
    setToken(t);
    $('#login-token').value = '';
    hideLogin();
    route();
  });
  $('#sign-out').addEventListener('click', () => showLogin(''));
  window.addEventListener('hashchange', () => {
    if (location.hash.includes('token=')) takeTokenFromUrl();
    route();
  });
  route();
}

start();
