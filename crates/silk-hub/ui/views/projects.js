// @ts-check
// Projects (`#/projects`), the project form (`#/projects/new`), and one project
// (`#/projects/NAME`: its settings, versions with their state, a build by hand, and the build
// log of a version, live while it builds: `#/projects/NAME?v=VERSION`).
//
// The password and the webhook secret are never shown: the API does not return them. The
// secret appears once, in the answer that created the project, and this page shows it then.

import { act, api, enc, poll, showError } from '../api.js';
import { add, h, syncRows, table } from '../dom.js';
import { badge, fmtBytes, fmtClock, fmtDuration, rel } from '../format.js';
import { pageHeader, section } from './parts.js';

/** @typedef {import('../types.js').ProjectView} ProjectView */
/** @typedef {import('../types.js').VersionView} VersionView */
/** @typedef {import('../types.js').BuildLog} BuildLog */

export function viewProjects(root) {
  const list = table('projects-table', ['Name', 'Repository', 'Build', 'Tag pattern', 'Updated']);
  root.append(
    pageHeader('Projects', 'Crawler code from git. Every release tag a signed webhook announces is built into a version.',
      h('a', { class: 'btn btn-primary', href: '#/projects/new', testid: 'new-project' }, 'New project')),
    section(null, list.el),
  );
  async function refresh() {
    /** @type {ProjectView[]} */
    const projects = await api('GET', '/api/v1/projects');
    syncRows(list.tbody, projects, (p) => p.name, (p) => h('tr', { testid: 'project-row', data: { name: p.name } },
      h('td', null, h('a', { href: `#/projects/${enc(p.name)}`, class: 'strong', testid: 'project-link' }, p.name)),
      h('td', { class: 'mono small clip' }, p.git_url),
      h('td', null, p.build.kind),
      h('td', null, h('code', null, p.tag_pattern)),
      h('td', null, rel(p.updated_ms))));
    list.setEmpty(projects.length ? '' : 'No projects yet. Create one with “New project” (an admin token is needed).');
  }
  return poll(refresh);
}

function field(label, input, hint) {
  return h('label', { class: 'field' }, h('span', null, label), input, hint ? h('small', { class: 'muted' }, hint) : null);
}

/** The inputs of the project form. */
function projectInputs() {
  const text = (id, placeholder, extra = {}) => h('input', { type: 'text', id, testid: id, autocomplete: 'off', spellcheck: 'false', placeholder, ...extra });
  return {
    name: text('project-name', 'shop', { required: true }),
    git_url: text('project-git-url', 'https://git.example.com/team/shop.git', { class: 'mono', required: true }),
    username: text('project-username', 'ci-bot'),
    // Never filled from the API (it does not return the password); empty keeps it.
    password: h('input', { type: 'password', id: 'project-password', testid: 'project-password', autocomplete: 'new-password' }),
    branch: text('project-branch', 'main'),
    tag_pattern: text('project-tag-pattern', 'release/{name}/{version}', { class: 'mono' }),
    kind: h('select', { id: 'project-kind', testid: 'project-kind' },
      h('option', { value: 'command' }, 'command — run a command, pack the directory'),
      h('option', { value: 'container' }, 'container — build an image')),
    command: h('textarea', { id: 'project-command', testid: 'project-command', rows: '3', class: 'mono', spellcheck: 'false', placeholder: 'python3 -m venv .venv && .venv/bin/pip install -r requirements.txt' }),
    containerfile: text('project-containerfile', 'Containerfile', { class: 'mono' }),
    timeout: h('input', { type: 'number', id: 'project-timeout', testid: 'project-timeout', min: '1', placeholder: '1800' }),
  };
}

export function viewProjectForm(root) {
  const f = projectInputs();
  const save = h('button', { type: 'submit', class: 'btn btn-primary', testid: 'project-save' }, 'Create project');
  const form = h('form', { class: 'card form', testid: 'project-form', novalidate: true },
    h('div', { class: 'form-grid' },
      field('Name', f.name, 'Lowercase letters, digits, - and _.'),
      field('Git URL', f.git_url, 'https://, http:// or file://; no credentials in it.'),
      field('User', f.username, 'For HTTP basic auth.'),
      field('Password or token', f.password, 'Stored encrypted; never shown again.'),
      field('Branch', f.branch),
      field('Tag pattern', f.tag_pattern, 'Empty: release/{name}/{version}.'),
      field('Build', f.kind),
      field('Container file', f.containerfile, 'Container builds; empty: Containerfile, else Dockerfile.'),
      field('Timeout (s)', f.timeout, 'Empty: 30 minutes.')),
    field('Build command', f.command, 'Command builds; runs in the checkout with sh -c (it runs on the hub: admins only).'),
    h('div', { class: 'form-actions' },
      h('span', { class: 'spacer' }),
      h('a', { class: 'btn btn-ghost', href: '#/projects' }, 'Cancel'),
      save));
  const secretBox = h('div', { hidden: true });
  add(root, [
    h('div', { class: 'crumbs' }, h('a', { href: '#/projects' }, 'Projects'), ' / New'),
    pageHeader('New project', 'A git repository whose release tags are built into versions.'),
    form,
    secretBox,
  ]);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const val = (el) => el.value.trim();
    if (!val(f.name) || !val(f.git_url)) {
      showError(new Error('Name and Git URL are required.'));
      return;
    }
    const build = { kind: f.kind.value };
    if (f.kind.value === 'command' && val(f.command)) build.command = f.command.value;
    if (f.kind.value === 'container' && val(f.containerfile)) build.containerfile = val(f.containerfile);
    if (val(f.timeout)) build.timeout_ms = Math.round(Number(val(f.timeout)) * 1000);
    const body = { name: val(f.name), git_url: val(f.git_url), build };
    for (const k of ['username', 'branch', 'tag_pattern']) if (val(f[k])) body[k] = val(f[k]);
    if (f.password.value) body.password = f.password.value;
    const made = await act(save, () => api('POST', '/api/v1/projects', body));
    if (!made) return;
    f.password.value = '';
    form.hidden = true;
    secretBox.hidden = false;
    const url = `${location.origin}${made.project.webhook_path}`;
    secretBox.replaceChildren(section('Webhook',
      h('p', null, 'Point the git service’s webhook at this URL, with this secret. The secret is shown only this once.'),
      h('p', null, 'URL: ', h('code', { testid: 'webhook-url' }, url)),
      h('p', null, 'Secret: ', h('code', { testid: 'webhook-secret' }, made.webhook_secret)),
      h('a', { class: 'btn btn-primary', href: `#/projects/${enc(made.project.name)}`, testid: 'project-open' }, `Open ${made.project.name}`)));
  });
  f.name.focus();
  return () => {};
}

/** @param {VersionView} v */
function artifactText(v) {
  const a = v.artifact;
  if (!a) return '—';
  if (a.kind === 'dir') return `dir ${fmtBytes(a.bytes)} · ${a.sha256.slice(0, 12)}`;
  return `image ${a.image}`;
}

export function viewProject(root, name, params) {
  const selected = params.get('v');
  const f = projectInputs();
  f.name.readOnly = true;
  const removePassword = h('input', { type: 'checkbox', testid: 'project-remove-password' });
  const save = h('button', { type: 'submit', class: 'btn btn-primary', testid: 'project-save' }, 'Save changes');
  const del = h('button', { type: 'button', class: 'btn btn-danger', testid: 'project-delete' }, 'Delete project');
  const form = h('form', { class: 'card form', testid: 'project-form', novalidate: true },
    h('div', { class: 'form-grid' },
      field('Git URL', f.git_url),
      field('User', f.username),
      field('Password or token', f.password, 'Never shown. Empty: unchanged.'),
      h('label', { class: 'field field-inline' }, removePassword, h('span', null, 'Remove the password')),
      field('Branch', f.branch),
      field('Tag pattern', f.tag_pattern),
      field('Build', f.kind),
      field('Container file', f.containerfile),
      field('Timeout (s)', f.timeout)),
    field('Build command', f.command),
    h('div', { class: 'form-actions' }, del, h('span', { class: 'spacer' }), save));
  const hasPassword = h('span', { class: 'muted', testid: 'project-has-password' });
  const webhook = h('code', { testid: 'project-webhook' });
  const ref = h('input', { type: 'text', testid: 'build-ref', placeholder: 'release/NAME/1.0.0, main, a commit', class: 'mono', spellcheck: 'false' });
  const version = h('input', { type: 'text', testid: 'build-version', placeholder: 'version (if not a release tag)', spellcheck: 'false' });
  const buildBtn = h('button', { type: 'submit', class: 'btn btn-primary', testid: 'build-start' }, 'Build');
  const buildForm = h('form', { class: 'inline-form', testid: 'build-form' }, ref, version, buildBtn);
  const versions = table('versions-table', ['Version', 'Tag', 'Commit', 'State', 'Artifact', 'Built', 'Took', { label: '', cls: 'col-actions' }]);
  const logBox = h('div', { class: 'log', testid: 'build-log' });
  const logState = h('span', { testid: 'build-log-state' });
  const logSection = selected
    ? section(null, h('h2', { class: 'card-title' }, `Build log of ${selected} `, logState), logBox)
    : null;
  add(root, [
    h('div', { class: 'crumbs' }, h('a', { href: '#/projects' }, 'Projects'), ' / ', name),
    pageHeader(name, null, h('span', null, 'Password: ', hasPassword), h('span', null, ' Webhook: POST ', webhook)),
    section('Versions', buildForm, versions.el),
    logSection,
    section('Settings', form),
  ]);

  /** @type {ProjectView|null} */
  let original = null;
  /** @param {ProjectView} p */
  function fill(p) {
    original = p;
    f.name.value = p.name;
    f.git_url.value = p.git_url;
    f.username.value = p.username || '';
    f.branch.value = p.branch || '';
    f.tag_pattern.value = p.tag_pattern;
    f.kind.value = p.build.kind;
    f.command.value = p.build.command || '';
    f.containerfile.value = p.build.containerfile || '';
    f.timeout.value = p.build.timeout_ms ? String(p.build.timeout_ms / 1000) : '';
    hasPassword.textContent = p.has_password ? 'set (never shown)' : 'none';
    webhook.textContent = p.webhook_path;
  }

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    if (!original) return;
    const val = (el) => el.value.trim();
    const build = { kind: f.kind.value };
    if (f.kind.value === 'command' && val(f.command)) build.command = f.command.value;
    if (f.kind.value === 'container' && val(f.containerfile)) build.containerfile = val(f.containerfile);
    if (val(f.timeout)) build.timeout_ms = Math.round(Number(val(f.timeout)) * 1000);
    /** @type {Record<string, unknown>} */
    const patch = { git_url: val(f.git_url), username: val(f.username) || null, branch: val(f.branch) || null, tag_pattern: val(f.tag_pattern), build };
    if (removePassword.checked) patch.password = null;
    else if (f.password.value) patch.password = f.password.value;
    const p = await act(save, () => api('PATCH', `/api/v1/projects/${enc(name)}`, patch));
    if (p) {
      f.password.value = '';
      removePassword.checked = false;
      fill(p);
    }
  });
  del.addEventListener('click', async () => {
    if (!window.confirm(`Delete project ${name} with its versions, logs and artifacts?`)) return;
    const out = await act(del, () => api('DELETE', `/api/v1/projects/${enc(name)}`));
    if (out !== undefined) location.hash = '#/projects';
  });
  buildForm.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const body = { ref: ref.value.trim() };
    if (version.value.trim()) body.version = version.value.trim();
    const v = await act(buildBtn, () => api('POST', `/api/v1/projects/${enc(name)}/builds`, body));
    if (v) location.hash = `#/projects/${enc(name)}?v=${enc(v.version)}`;
  });

  /** @param {VersionView} v */
  function row(v) {
    const took = v.started_ms && v.finished_ms ? fmtDuration(v.finished_ms - v.started_ms) : '—';
    return h('tr', { testid: 'version-row', data: { version: v.version, state: v.state } },
      h('td', null, h('a', { href: `#/projects/${enc(name)}?v=${enc(v.version)}`, class: 'strong', testid: 'version-link' }, v.version)),
      h('td', { class: 'mono small' }, v.tag.replace(/^refs\/tags\//, '')),
      h('td', { class: 'mono small', title: v.commit || '' }, v.commit ? v.commit.slice(0, 12) : '—'),
      h('td', null, badge(v.state, 'version-state'), v.reason ? h('div', { class: 'muted small clip', title: v.reason }, v.reason) : null),
      h('td', { class: 'small' }, artifactText(v)),
      h('td', null, v.finished_ms ? rel(v.finished_ms) : '—'),
      h('td', { class: 'num' }, took),
      h('td', { class: 'col-actions' }, h('a', { href: `#/projects/${enc(name)}?v=${enc(v.version)}`, class: 'btn btn-small' }, 'Log')));
  }

  let loaded = false;
  let after = 0;
  let logDone = false;
  return poll(async () => {
    if (!loaded) {
      fill(await api('GET', `/api/v1/projects/${enc(name)}`));
      loaded = true;
    }
    /** @type {VersionView[]} */
    const vs = await api('GET', `/api/v1/projects/${enc(name)}/versions`);
    syncRows(versions.tbody, vs, (v) => v.version, row);
    versions.setEmpty(vs.length ? '' : 'No versions yet: push a release tag (the webhook queues a build) or build a ref here.');
    if (selected && !logDone) {
      // The log after the last line shown, until the build is over and its last lines are in.
      for (;;) {
        /** @type {BuildLog} */
        const page = await api('GET', `/api/v1/projects/${enc(name)}/versions/${enc(selected)}/log?after=${after}`);
        const stick = logBox.scrollHeight - logBox.scrollTop - logBox.clientHeight < 24;
        for (const l of page.lines) {
          after = l.id;
          const level = ['trace', 'debug', 'info', 'warn', 'error'].includes(l.level) ? l.level : 'info';
          logBox.append(h('div', { class: `log-line level-${level}`, testid: 'log-line' },
            h('span', { class: 'log-ts' }, fmtClock(l.ts_ms)),
            h('span', { class: 'log-level' }, level),
            h('span', { class: 'log-source' }, l.source),
            h('span', { class: 'log-msg' }, l.message)));
        }
        if (stick) logBox.scrollTop = logBox.scrollHeight;
        logState.replaceChildren(badge(page.state, 'build-log-badge'));
        const finished = page.state === 'ready' || page.state === 'failed';
        if (finished && page.lines.length === 0 && logBox.childElementCount > 0) logDone = true;
        if (!page.next) break;
      }
    }
  }, 1000);
}
