// @ts-check
// The router (`#/router`), when the hub runs one (`--router CONFIG`): its inbounds (source,
// convert chain, tasks received, decisions by reason) and outbounds (target, backlog read
// now, `max_lag` holding, queued, pushed, push rate, decisions by reason), the latest failure
// records (each can be replayed), and `check_task`: what the router would do with a task,
// tried from the page (nothing is pushed or recorded). Admins only, like the API under it.

import { act, api, poll } from '../api.js';
import { h, syncRows, table } from '../dom.js';
import { badge, fmtInt, fmtRate, rel } from '../format.js';
import { pageHeader, section } from './parts.js';

/** @typedef {import('../types.js').RouterView} RouterView */
/** @typedef {import('../types.js').RouterFailuresPage} RouterFailuresPage */

/** @param {Record<string, number>} counters */
function counterChips(counters) {
  return Object.entries(counters).map(([reason, n]) =>
    h('span', { class: 'chip', testid: 'router-counter', data: { reason } }, `${reason} ${fmtInt(n)}`));
}

/** The check_task form and where its answer shows. */
function checkForm() {
  const inbound = h('select', { id: 'router-check-inbound', testid: 'router-check-inbound' });
  const task = h('textarea', {
    id: 'router-check-task', testid: 'router-check-task', rows: '6', class: 'mono', spellcheck: 'false',
    placeholder: '{"company_name": "…", "task_src": 3}',
  });
  const run = h('button', { type: 'button', class: 'btn', testid: 'router-check-run' }, 'Check');
  const verdict = h('p', { testid: 'router-check-verdict', class: 'strong' });
  const why = h('p', { testid: 'router-check-why', class: 'muted' });
  const shown = h('pre', { testid: 'router-check-answer', class: 'mono small' });
  run.addEventListener('click', () => act(run, async () => {
    let parsed;
    try {
      parsed = JSON.parse(task.value || '{}');
    } catch (e) {
      throw new Error(`The task is not JSON: ${e.message || e}`);
    }
    const answer = await api('POST', '/api/v1/router/check_task', { inbound: inbound.value, task: parsed });
    verdict.textContent = `${answer.decision} (${answer.reason})${answer.outbound ? ` → ${answer.outbound}` : ''}`;
    why.textContent = answer.why;
    shown.textContent = JSON.stringify(answer.task ?? answer.converted, null, 2);
  }));
  const el = h('div', { class: 'form' },
    h('label', { class: 'field' }, h('span', null, 'Inbound'), inbound),
    h('label', { class: 'field' }, h('span', null, 'Task (JSON)'), task),
    h('div', null, run), verdict, why, shown);
  return {
    el,
    /** @param {string[]} names */
    setInbounds(names) {
      const have = [...inbound.options].map((o) => o.value).join('\n');
      if (have === names.join('\n')) return;
      const keep = inbound.value;
      inbound.replaceChildren(...names.map((n) => h('option', { value: n }, n)));
      if (names.includes(keep)) inbound.value = keep;
    },
  };
}

export function viewRouter(root) {
  const summary = h('p', { testid: 'router-summary', class: 'muted' });
  const inbounds = table('router-inbounds', ['Inbound', 'Class', 'Source', 'Convert', 'Received', 'Decisions']);
  const outbounds = table('router-outbounds', ['Outbound', 'Class', 'Target', 'Backlog', 'Max lag', 'Queued', 'Pushed', 'Errors', 'Rate/s', 'Decisions']);
  const failures = table('router-failures', ['When', 'Inbound', 'Outbound', 'Reason', 'Why', '']);
  const check = checkForm();
  root.append(
    pageHeader('Router', 'The task router this hub runs: where tasks come from, where they go, what failed.'),
    summary,
    section('Inbounds', inbounds.el),
    section('Outbounds', outbounds.el),
    section('Recent failures', failures.el),
    section('Check a task', check.el));
  /** The running router's inbounds and outbounds; false when the hub runs none. */
  const showRouter = async () => {
    /** @type {RouterView} */
    let view;
    try {
      view = await api('GET', '/api/v1/router');
    } catch (e) {
      if (/** @type {any} */ (e).status === 503) {
        summary.textContent = e.message;
        inbounds.setEmpty('No router.');
        outbounds.setEmpty('No router.');
        return;
      }
      throw e;
    }
    summary.textContent = `Project ${view.project}: ${view.inbounds.length} inbound(s), ${view.outbounds.length} outbound(s), ${fmtInt(view.failures)} failure record(s) kept.`;
    syncRows(inbounds.tbody, view.inbounds, (i) => `${i.name}:${i.received}:${JSON.stringify(i.counters)}`, (i) =>
      h('tr', { testid: 'router-inbound-row', data: { name: i.name } },
        h('td', { class: 'mono strong' }, i.name, i.disabled ? h('span', { class: 'chip' }, 'disabled') : null),
        h('td', { class: 'mono small' }, i.class),
        h('td', { class: 'mono small' }, i.source),
        h('td', { class: 'small' }, i.converts.join(' → ')),
        h('td', { class: 'num', testid: 'router-inbound-received' }, fmtInt(i.received)),
        h('td', null, counterChips(i.counters))));
    inbounds.setEmpty(view.inbounds.length ? '' : 'No inbound: tasks only come by POST /task/.');
    check.setInbounds(view.inbounds.filter((i) => !i.disabled).map((i) => i.name));
    syncRows(outbounds.tbody, view.outbounds, (o) => JSON.stringify(o), (o) =>
      h('tr', { testid: 'router-outbound-row', data: { name: o.name } },
        h('td', { class: 'mono strong' }, o.name, o.disabled ? h('span', { class: 'chip' }, 'disabled') : null),
        h('td', { class: 'mono small' }, o.class),
        h('td', { class: 'mono small' }, o.target),
        h('td', { class: 'num', testid: 'router-outbound-backlog', title: o.backlog_error ?? '' },
          o.backlog == null ? (o.backlog_error ? 'error' : '—') : fmtInt(o.backlog)),
        h('td', null, o.max_lag < 0 ? '—' : fmtInt(o.max_lag),
          o.holding ? badge('holding', 'router-outbound-holding') : null),
        h('td', { class: 'num' }, fmtInt(o.queued)),
        h('td', { class: 'num', testid: 'router-outbound-pushed' }, fmtInt(o.pushed)),
        h('td', { class: 'num' }, fmtInt(o.push_errors)),
        h('td', { class: 'num' }, fmtRate(o.rate_per_second)),
        h('td', null, counterChips(o.counters))));
    outbounds.setEmpty(view.outbounds.length ? '' : 'No outbound.');
  };
  return poll(async () => {
    await showRouter();
    /** @type {RouterFailuresPage} */
    const page = await api('GET', '/api/v1/router/failures?limit=50');
    syncRows(failures.tbody, page.failures, (f) => `${f.id}:${f.replayed_ms ?? ''}`, (f) => {
      const replay = h('button', { type: 'button', class: 'btn btn-small', testid: 'router-failure-replay' },
        f.replayed_ms ? 'Replay again' : 'Replay');
      replay.hidden = !f.task;
      replay.addEventListener('click', () => act(replay, async () => {
        const answer = await api('POST', '/api/v1/router/failures/replay', { ids: [f.id], again: true });
        const r = answer.replayed[0];
        replay.title = r ? `${r.decision ?? 'not replayed'}: ${r.why}` : '';
      }));
      return h('tr', { testid: 'router-failure-row', data: { id: f.id, reason: f.reason } },
        h('td', null, rel(f.time_ms)),
        h('td', { class: 'mono' }, f.inbound ?? '—'),
        h('td', { class: 'mono' }, f.outbound ?? '—'),
        h('td', null, badge(f.reason, 'router-failure-reason')),
        h('td', { class: 'small' }, f.why, f.replayed_ms ? h('span', { class: 'chip' }, 'replayed') : null),
        h('td', null, replay));
    });
    failures.setEmpty(page.failures.length ? '' : 'No failure records.');
  });
}
