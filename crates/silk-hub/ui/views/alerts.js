// @ts-check
// Alerts (`#/alerts`): the notification rules (events, scope, channel — never its secrets —,
// rate limit) and the latest deliveries (state, attempts, last error), polled. Rules are
// changed with `silk alerts` or the API (admins); an admin can send a rule's test here.

import { act, api, enc, poll } from '../api.js';
import { h, syncRows, table } from '../dom.js';
import { badge, rel, shortId } from '../format.js';
import { pageHeader, section } from './parts.js';

/** @typedef {import('../types.js').AlertRuleView} AlertRuleView */
/** @typedef {import('../types.js').DeliveryView} DeliveryView */

/** @param {AlertRuleView} r */
function channelText(r) {
  const c = /** @type {any} */ (r.channel);
  if (c.webhook) return `webhook ${c.webhook.url} (${c.webhook.format})`;
  if (c.email) return `email ${(c.email.to || []).join(', ')} via ${c.email.host}:${c.email.port}`;
  return '?';
}

/** @param {AlertRuleView} r */
function scopeText(r) {
  if (r.job) return `job ${r.job}`;
  if (r.project) return `project ${r.project}`;
  return 'all';
}

/** @param {DeliveryView} d */
function aboutCell(d) {
  const run = d.facts && d.facts.run;
  if (typeof run === 'string') return h('a', { href: `#/runs/${enc(run)}`, class: 'mono', title: run }, shortId(run));
  const what = (d.facts && (d.facts.agent || d.facts.project)) || '';
  return h('span', { class: 'mono' }, String(what));
}

export function viewAlerts(root) {
  const rules = table('alert-rules-table', ['Rule', 'Events', 'Scope', 'Channel', 'Limit', 'Enabled', '']);
  const deliveries = table('alert-deliveries-table', ['When', 'Rule', 'Event', 'About', 'State', 'Attempts', 'Subject', 'Error']);
  root.append(
    pageHeader('Alerts', 'Who is told what: rules (changed with `silk alerts` or the API) and their deliveries, newest first.'),
    section('Rules', rules.el),
    section('Deliveries', deliveries.el));
  return poll(async () => {
    /** @type {AlertRuleView[]} */
    const list = await api('GET', '/api/v1/alerts/rules');
    syncRows(rules.tbody, list, (r) => r.name, (r) => {
      const test = h('button', { type: 'button', class: 'btn btn-small', testid: 'alert-test' }, 'Send test');
      test.addEventListener('click', () => act(test, () => api('POST', `/api/v1/alerts/rules/${enc(r.name)}/test`)));
      return h('tr', { testid: 'alert-rule-row', data: { name: r.name } },
        h('td', { class: 'mono strong' }, r.name),
        h('td', null, r.events.map((e) => h('span', { class: 'chip' }, String(e)))),
        h('td', null, scopeText(r)),
        h('td', { class: 'mono small' }, channelText(r)),
        h('td', { class: 'num' }, `${r.rate_limit.max} / ${Math.round(r.rate_limit.per_ms / 60000)} min`),
        h('td', null, r.enabled ? 'yes' : 'no'),
        h('td', null, test));
    });
    rules.setEmpty(list.length ? '' : 'No alert rules: nobody is told anything. See docs/alerts.md.');
    /** @type {DeliveryView[]} */
    const sent = await api('GET', '/api/v1/alerts/deliveries?limit=100');
    syncRows(deliveries.tbody, sent, (d) => `${d.id}:${d.state}:${d.attempts}`, (d) =>
      h('tr', { testid: 'alert-delivery-row', data: { id: d.id } },
        h('td', null, rel(d.created_ms)),
        h('td', { class: 'mono' }, d.rule),
        h('td', null, String(d.event)),
        h('td', null, aboutCell(d)),
        h('td', null, badge(d.state, 'alert-delivery-state')),
        h('td', { class: 'num' }, String(d.attempts)),
        h('td', null, d.subject),
        h('td', { class: 'muted small' }, d.error ?? '')));
    deliveries.setEmpty(sent.length ? '' : 'Nothing sent yet.');
  });
}
