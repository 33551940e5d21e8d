// @ts-check
// The dashboard (`#/`): agents, the tenant's usage against its quotas, runs in progress,
// recent runs.

import { api, poll, tenant } from '../api.js';
import { cssVar, drawSpark } from '../chart.js';
import { h, syncRows, table } from '../dom.js';
import { ACTIVE, TERMINAL, badge, fmtBytes, fmtDuration, fmtInt, fmtRate, progressBar, rel, runLink } from '../format.js';
import { agentHistory, meter, pageHeader, recordAgents, runName, section, sortRuns } from './parts.js';

/** @typedef {import('../types.js').AgentView} AgentView */
/** @typedef {import('../types.js').RunView} RunView */
/** @typedef {import('../types.js').TenantUsage} TenantUsage */

export function viewDashboard(root) {
  const tiles = h('div', { class: 'tiles' });
  const agentGrid = h('div', { class: 'agent-grid', testid: 'dashboard-agents' });
  const agentsEmpty = h('p', { class: 'empty', hidden: true }, 'No agents have registered yet.');
  const active = table('dashboard-runs', ['Run', 'Job', 'State', { label: 'Progress', cls: 'col-progress' }, 'Pages/s', 'Items', 'Started']);
  const recent = table('dashboard-recent', ['Run', 'Job', 'State', 'Items', 'Finished', 'Took']);
  const usageBox = h('div', { class: 'usage', testid: 'dashboard-usage' });
  const usageSection = section('Usage today', usageBox);
  // The token's own tenant, looked up once per visit of the dashboard.
  const usageOf = { name: '' };
  usageSection.hidden = true;
  root.append(
    pageHeader('Dashboard', 'The fleet and the work in progress, refreshed every 2 s.'),
    tiles,
    section('Agents', agentGrid, agentsEmpty),
    usageSection,
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
    /** @type {[AgentView[], RunView[]]} */
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
    await showUsage(usageSection, usageBox, usageOf);
  });
  return stop;
}

/**
 * The usage of the tenant the UI acts in (the one chosen by an admin, else the token's own;
 * an admin's token with several tenants and none chosen: `default`, as the switcher shows)
 * against its quotas: a bar per limited quota, a count for the others. What was shown stays
 * when a poll cannot read it; hidden when it was never read (e.g. no such rights).
 */
async function showUsage(sectionEl, box, of) {
  /** @type {TenantUsage} */
  let u;
  try {
    let name = tenant();
    if (!name) {
      if (!of.name) {
        /** @type {Array<{name: string}>} */
        const tenants = await api('GET', '/api/v1/tenants');
        of.name = tenants.length === 1 ? tenants[0].name : 'default';
      }
      name = of.name;
    }
    u = await api('GET', `/api/v1/tenants/${encodeURIComponent(name)}/usage`);
  } catch {
    if (!box.childElementCount) sectionEl.hidden = true;
    return;
  }
  sectionEl.hidden = false;
  const q = u.quotas || {};
  const row = (label, used, limit, fmt, testid) => h('div', { class: 'kv' }, h('span', null, label),
    limit != null
      ? meter(used / limit, `${fmt(used)} of ${fmt(limit)}`, testid)
      : h('span', { class: 'meter-label', testid }, `${fmt(used)} (no limit)`));
  box.replaceChildren(
    h('div', { class: 'muted' }, `Tenant ${u.tenant}, ${u.day} (${u.time_zone}); the counters start again `, rel(u.resets_ms), '.'),
    row('Pages', u.pages, q.pages_per_day, fmtInt, 'usage-pages'),
    row('Bytes', u.bytes, q.bytes_per_day, fmtBytes, 'usage-bytes'),
    row('Runs running', u.running_runs, q.concurrent_runs, fmtInt, 'usage-runs'),
    h('div', { class: 'muted', testid: 'usage-notes' },
      `${fmtInt(u.reserved)} pages reserved by running runs · ${fmtInt(u.overshoot_pages)} past their slices · ${fmtInt(u.quota_paused_runs)} run(s) paused by a quota`
        + (q.pages_per_run != null ? ` · at most ${fmtInt(q.pages_per_run)} pages per run` : '')
        + (q.agent_slots != null ? ` · at most ${fmtInt(q.agent_slots)} requests out at once (agent slots)` : '')),
  );
}

function tile(label, value, testid) {
  return h('div', { class: 'tile', testid }, h('div', { class: 'tile-value' }, value), h('div', { class: 'tile-label' }, label));
}
