// @ts-check
// The fleet (`#/agents`).

import { api, poll } from '../api.js';
import { h, syncRows, table } from '../dom.js';
import { badge, fmtBytes, fmtInt, fmtRate, rel, relText } from '../format.js';
import { meter, pageHeader, recordAgents, section } from './parts.js';

/** @typedef {import('../types.js').AgentView} AgentView */
/** @typedef {import('../types.js').PoolView} PoolView */

export function viewAgents(root) {
  const list = table('agents-table', ['Agent', 'State', { label: 'CPU', cls: 'col-meter' }, { label: 'Memory', cls: 'col-meter' }, 'Downloaders', 'In flight', 'QPS', 'Last heartbeat', 'phi', 'Labels']);
  // Pools the hub's config declares (`--pools`): the agents each needs and its scale hook.
  const pools = table('pools-table', ['Pool', { label: 'Agents', cls: 'col-meter' }, 'Deficit', 'Scale command']);
  const poolsCard = section('Pools', pools.el);
  poolsCard.hidden = true;
  root.append(pageHeader('Agents', 'Downloader machines, as their heartbeats report them.'), poolsCard, section(null, list.el));
  return poll(async () => {
    /** @type {PoolView[]} */
    const declared = await api('GET', '/api/v1/pools');
    poolsCard.hidden = declared.length === 0;
    syncRows(pools.tbody, declared, (p) => p.name, (p) => {
      const s = p.scale;
      const last = s.last_ms ? `${s.last_ok ? 'ok' : 'failed'} ${relText(s.last_ms)}` : 'not run';
      const note = !s.command ? 'none (reported only)'
        : s.running ? 'running'
          : [last, s.attempts ? `${s.attempts} attempt(s)` : null, s.next_ms ? `next check ${relText(s.next_ms)}` : null].filter(Boolean).join(' · ');
      return h('tr', { testid: 'pool-row', data: { id: p.name } },
        h('td', { class: 'mono strong' }, p.name),
        h('td', { class: 'col-meter' }, meter(p.agents ? p.alive / p.agents : 1, `${fmtInt(p.alive)} of ${fmtInt(p.agents)}`)),
        h('td', { class: 'num' }, p.deficit ? h('span', { class: 'badge state-failed', testid: 'pool-deficit' }, fmtInt(p.deficit)) : '0'),
        h('td', { title: s.last_message || '' }, note));
    });
    /** @type {AgentView[]} */
    const agents = await api('GET', '/api/v1/agents');
    recordAgents(agents);
    const sorted = [...agents].sort((a, b) => String(a.id).localeCompare(String(b.id)));
    syncRows(list.tbody, sorted, (a) => a.id, (a) => {
      const memFrac = a.total_memory_bytes ? a.memory_bytes / a.total_memory_bytes : 0;
      const labels = Object.entries(a.labels || {});
      return h('tr', { testid: 'agent-row', data: { id: String(a.id) } },
        h('td', null, h('div', { class: 'mono strong' }, a.id), h('div', { class: 'muted small' }, [a.host, a.version ? `v${a.version}` : null].filter(Boolean).join(' · '))),
        h('td', null, badge(a.state, 'agent-state'), a.draining ? h('span', { class: 'chip', testid: 'agent-draining', title: 'No new work: it finishes the runs that hold it' }, 'draining') : null),
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
