// @ts-check
// Logs across runs (`#/logs`, `?job=&run=&level=&q=&since=`): "which runs logged this error
// yesterday". A search form over `GET /api/v1/logs`; the newest lines first, each with its
// run; "Older" pages back. The form's values live in the address, so a search can be shared.

import { act, api, enc } from '../api.js';
import { h, table } from '../dom.js';
import { shortId } from '../format.js';
import { pageHeader, section } from './parts.js';

/** @typedef {import('../types.js').LogPage} LogPage */
/** @typedef {import('../types.js').LogLineView} LogLineView */

const PAGE = 200;
const SINCE = [['1h', 3600e3], ['1d', 86400e3], ['7d', 7 * 86400e3], ['30d', 30 * 86400e3], ['any', 0]];

function field(label, input) {
  return h('label', { class: 'field' }, h('span', null, label), input);
}

/** @param {URLSearchParams} params */
export function viewLogs(root, params) {
  const f = {
    job: h('input', { type: 'text', testid: 'logs-job', autocomplete: 'off', spellcheck: 'false', placeholder: 'any job', value: params.get('job') || '' }),
    run: h('input', { type: 'text', testid: 'logs-run', autocomplete: 'off', spellcheck: 'false', class: 'mono', placeholder: 'any run', value: params.get('run') || '' }),
    level: h('select', { testid: 'logs-level' },
      ['trace', 'debug', 'info', 'warn', 'error'].map((l) => h('option', { value: l }, l))),
    q: h('input', { type: 'text', testid: 'logs-q', autocomplete: 'off', spellcheck: 'false', placeholder: 'text in the message', value: params.get('q') || '' }),
    since: h('select', { testid: 'logs-since' }, SINCE.map(([label]) => h('option', { value: label }, label === 'any' ? 'any time' : `last ${label}`))),
  };
  f.level.value = params.get('level') || 'info';
  f.since.value = params.get('since') || '1d';
  const go = h('button', { type: 'submit', class: 'btn btn-primary', testid: 'logs-search' }, 'Search');
  const form = h('form', { class: 'card form', testid: 'logs-form' },
    h('div', { class: 'form-grid' },
      field('Job', f.job), field('Run', f.run), field('Level at least', f.level), field('Since', f.since)),
    field('Text', f.q),
    h('div', { class: 'form-actions' }, h('span', { class: 'spacer' }), go));
  const list = table('logs-table', ['Time', 'Level', 'Run', 'Source', 'Message']);
  const count = h('span', { class: 'muted small', testid: 'logs-count' });
  const older = h('button', { type: 'button', class: 'btn', testid: 'logs-older', hidden: true }, 'Older');
  root.append(pageHeader('Logs', 'Log lines of every run and build, newest first.'), form,
    section(null, h('div', { class: 'card-title-row' }, count), list.el, h('div', { class: 'form-actions' }, older)));

  let next = null;
  let shown = 0;
  let stopped = false;

  function query(before) {
    const q = new URLSearchParams({ limit: String(PAGE), level: f.level.value });
    for (const key of ['job', 'run', 'q']) {
      const v = f[key].value.trim();
      if (v) q.set(key, v);
    }
    const span = SINCE.find(([label]) => label === f.since.value);
    if (span && span[1]) q.set('since_ms', String(Date.now() - span[1]));
    if (before != null) q.set('before', String(before));
    return q;
  }

  /** @param {LogLineView} line */
  function row(line) {
    const ts = new Date(line.ts_ms);
    const run = String(line.run_id);
    const runCell = run.startsWith('build:')
      ? h('span', { class: 'mono' }, run)
      : h('a', { href: `#/runs/${enc(run)}`, class: 'mono', title: run }, shortId(run));
    return h('tr', { class: `level-${line.level}`, testid: 'logs-row' },
      h('td', { class: 'mono small', title: ts.toISOString() }, ts.toLocaleString([], { hour12: false })),
      h('td', null, String(line.level)),
      h('td', null, runCell),
      h('td', { class: 'mono small' }, String(line.source ?? '')),
      h('td', { class: 'log-msg' }, String(line.message ?? '')));
  }

  async function load(before) {
    /** @type {LogPage} */
    const page = await api('GET', `/api/v1/logs?${query(before)}`);
    if (stopped) return;
    if (before == null) {
      list.tbody.replaceChildren();
      shown = 0;
    }
    list.tbody.append(...page.lines.map(row));
    shown += page.lines.length;
    next = page.next ?? null;
    older.hidden = next == null;
    count.textContent = `${shown} line${shown === 1 ? '' : 's'}${next == null ? '' : ' (more: Older)'}`;
    list.setEmpty(shown ? '' : 'No log line matches.');
  }

  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const key of ['job', 'run', 'q']) if (f[key].value.trim()) q.set(key, f[key].value.trim());
    q.set('level', f.level.value);
    q.set('since', f.since.value);
    const hash = `#/logs?${q}`;
    if (location.hash === hash) act(go, () => load(null));
    else location.hash = hash;
  });
  older.addEventListener('click', () => act(older, () => load(next)));
  act(go, () => load(null));
  return () => { stopped = true; };
}
