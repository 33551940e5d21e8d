// @ts-check
// Pieces the views share: page header, card section, meter, agent history, run order.

import { h } from '../dom.js';

/** @typedef {import('../types.js').RunView} RunView */
/** @typedef {import('../types.js').AgentView} AgentView */

// Views. Each takes its container and route parameters and returns its cleanup function.

export function pageHeader(title, subtitle, ...actions) {
  return h('div', { class: 'page-header' },
    h('div', null, h('h1', null, title), subtitle ? h('p', { class: 'muted subtitle' }, subtitle) : null),
    h('div', { class: 'actions' }, actions));
}

export function section(title, ...children) {
  return h('section', { class: 'card' }, title ? h('h2', { class: 'card-title' }, title) : null, children);
}

export function meter(frac, label, testid) {
  const fill = h('div', { class: 'meter-fill' });
  const f = Math.max(0, Math.min(1, frac || 0));
  fill.style.width = `${f * 100}%`;
  if (f > 0.85) fill.classList.add('meter-hot');
  return h('div', { class: 'meter-row', testid }, h('div', { class: 'meter' }, fill), h('span', { class: 'meter-label' }, label));
}

/** QPS history of the agents, kept while the page lives (the dashboard's sparklines). */
export const agentHistory = new Map();

/** @param {AgentView[]} agents */
export function recordAgents(agents) {
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

/**
 * Newest first.
 * @param {RunView[]} runs
 */
export function sortRuns(runs) {
  return [...runs].sort((a, b) => (b.created_ms || 0) - (a.created_ms || 0));
}

/** @param {RunView} run */
export function runName(run) {
  return run.job_name || run.spider_name || '—';
}
