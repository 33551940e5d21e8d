// @ts-check
// Formatting: numbers, sizes, durations, times, run states, progress.

import { h } from './dom.js';

/** @typedef {import('./types.js').RunView} RunView */
/** @typedef {import('./types.js').RunState} RunState */
/** @typedef {import('./types.js').AgentState} AgentState */

// Formatting.

export const RUN_STATES = ['pending', 'allocating', 'running', 'paused', 'stopping', 'succeeded', 'failed', 'cancelled'];
export const ACTIVE = new Set(['pending', 'allocating', 'running', 'paused', 'stopping']);
export const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);

const intFmt = new Intl.NumberFormat('en-US');

export function fmtInt(n) {
  return Number.isFinite(n) ? intFmt.format(Math.round(n)) : '—';
}

export function fmtRate(x) {
  if (!Number.isFinite(x)) return '—';
  return x >= 100 ? intFmt.format(Math.round(x)) : x.toFixed(1);
}

export function fmtBytes(n) {
  if (!Number.isFinite(n) || n <= 0) return n === 0 ? '0 B' : '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${i === 0 ? n : n.toFixed(n >= 100 ? 0 : 1)} ${units[i]}`;
}

export function fmtDuration(ms) {
  if (!Number.isFinite(ms) || ms < 0) return '—';
  const s = ms / 1000;
  if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.round(s)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.round(s % 60)} s`;
  const hrs = Math.floor(m / 60);
  if (hrs < 48) return `${hrs} h ${m % 60} min`;
  return `${Math.floor(hrs / 24)} d ${hrs % 24} h`;
}

export function fmtClock(ms) {
  if (!Number.isFinite(ms)) return '—';
  const d = new Date(ms);
  const time = d.toLocaleTimeString([], { hour12: false });
  return d.toDateString() === new Date().toDateString() ? time : `${d.toLocaleDateString()} ${time}`;
}

/** A relative time as text ("3 s ago", "in 4 min"), as of now. */
export function relText(ms) {
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
export function rel(ms, testid) {
  if (!Number.isFinite(ms)) return h('span', { class: 'muted', testid }, '—');
  return h('time', { class: 'rel', data: { ms: String(ms) }, title: fmtClock(ms), testid }, relText(ms));
}

setInterval(() => {
  if (document.hidden) return;
  for (const el of document.querySelectorAll('time.rel')) el.textContent = relText(Number(el.dataset.ms));
}, 1000);

export function shortId(id) {
  const s = String(id ?? '');
  return s.length > 14 ? `${s.slice(0, 6)}…${s.slice(-6)}` : s;
}

export function safeClass(s) {
  return String(s ?? 'unknown').toLowerCase().replace(/[^a-z0-9_-]/g, '') || 'unknown';
}

/**
 * @param {RunState|AgentState|string|null|undefined} state
 * @param {string} [testid]
 */
export function badge(state, testid) {
  return h('span', { class: `badge state-${safeClass(state)}`, testid }, String(state ?? 'unknown'));
}

/** @param {{id: string}} run */
export function runLink(run) {
  return h('a', { href: `#/runs/${encodeURIComponent(run.id)}`, class: 'mono', title: run.id }, shortId(run.id));
}

/**
 * success + failed + dropped over total (dropped requests are finished too: robots.txt, off-site redirects).
 * @param {RunView} run
 */
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

/**
 * @param {RunView} run
 * @param {string} testid
 */
export function progressBar(run, testid, big = false) {
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
