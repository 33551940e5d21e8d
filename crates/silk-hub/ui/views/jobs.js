// @ts-check
// Jobs (`#/jobs`) and the job form (`#/jobs/new`, `#/jobs/ID`).

import { act, api, enc, poll, showError } from '../api.js';
import { $, add, h, syncRows, table } from '../dom.js';
import { badge, fmtInt, progressBar, rel, runLink } from '../format.js';
import { pageHeader, section, sortRuns } from './parts.js';

/** @typedef {import('../types.js').Job} Job */

export function viewJobs(root) {
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
    /** @type {Job[]} */
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

export function viewJobForm(root, id) {
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
      field('Strategy', f.strategy, 'random, fixed:N, chained:N or hash:N; empty: random.'),
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
  /** @param {Job} job */
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
