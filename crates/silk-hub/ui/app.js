// @ts-check
// The Silk web UI: a single page app over the hub's REST API (`/api/v1`), hash-routed:
//   #/            dashboard (agents, runs in progress, recent runs)
//   #/jobs        jobs; #/jobs/new and #/jobs/ID are the job form (create, edit)
//   #/runs        runs, newest first (?state= filters)
//   #/runs/ID     one run: live state, progress, pages/s chart, controls, log tail, items
//   #/agents      the fleet
//   #/logs        log lines of every run, searched (?job=&run=&level=&q=&since=)
//   #/alerts      alert rules and their deliveries
//   #/router      the task router the hub runs (--router): inbounds, outbounds, failures,
//                 check_task
//   #/projects    projects from git; #/projects/new the form; #/projects/NAME its versions,
//                 settings and (?v=VERSION) a version's build log, live while it builds
//
// Rules these modules keep: text from the API only ever reaches the page through textContent /
// text nodes (no HTML parsing of data); every request carries the bearer token; lists poll
// every 2 s and stop while the tab is hidden; a run page follows the run's event stream
// (fetch + stream reader, since EventSource cannot send an Authorization header).
//
// This module is the entry (routing, sign-in, start); the others are `dom`, `format`, `api`,
// `chart`, and one module per view under `views/`. No build step, no third-party code.

import { api, clearError, onUnauthorized, setLive, setTenant, setToken, tenant, token } from './api.js';
import { $, h } from './dom.js';
import { viewAgents } from './views/agents.js';
import { viewAlerts } from './views/alerts.js';
import { viewDashboard } from './views/dashboard.js';
import { viewJobForm, viewJobs } from './views/jobs.js';
import { viewLogs } from './views/logs.js';
import { pageHeader } from './views/parts.js';
import { viewProject, viewProjectForm, viewProjects } from './views/projects.js';
import { viewRouter } from './views/router.js';
import { viewRun, viewRuns } from './views/runs.js';

function viewNotFound(root) {
  root.append(pageHeader('Not found', 'There is no such page.'), h('p', null, h('a', { href: '#/' }, 'Back to the dashboard')));
  return () => {};
}

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
  else if (section === 'logs' && parts.length === 1) cleanup = viewLogs(view, params);
  else if (section === 'alerts' && parts.length === 1) cleanup = viewAlerts(view);
  else if (section === 'router' && parts.length === 1) cleanup = viewRouter(view);
  else if (section === 'projects' && parts.length === 1) cleanup = viewProjects(view);
  else if (section === 'projects' && parts.length === 2 && parts[1] === 'new') cleanup = viewProjectForm(view);
  else if (section === 'projects' && parts.length === 2) cleanup = viewProject(view, parts[1], params);
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

/**
 * The tenant switcher: shown when the token sees more than one tenant (an admin's); the
 * choice is sent as `X-Silk-Tenant` with every call.
 */
async function loadTenants() {
  const box = $('#tenant-switch');
  const select = /** @type {HTMLSelectElement} */ ($('#tenant'));
  /** @type {Array<{name: string}>} */
  let tenants;
  try {
    tenants = await api('GET', '/api/v1/tenants');
  } catch (e) {
    if (e && (e.status === 404 || e.status === 403) && tenant()) {
      // The chosen tenant is gone, or not this token's to choose: back to the token's own.
      setTenant('');
      return loadTenants();
    }
    box.hidden = true;
    return;
  }
  box.hidden = tenants.length < 2;
  select.replaceChildren(
    ...tenants.map((t) => {
      const option = document.createElement('option');
      option.value = t.name;
      option.textContent = t.name;
      return option;
    }),
  );
  select.value = tenant() || 'default';
}

function start() {
  onUnauthorized(showLogin);
  $('#tenant').addEventListener('change', (ev) => {
    setTenant(/** @type {HTMLSelectElement} */ (ev.target).value);
    route();
  });
  takeTokenFromUrl();
  $('#sign-out').hidden = !token();
  $('#login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = $('#login-token').value.trim();
    if (!t) return;
    setToken(t);
    $('#login-token').value = '';
    hideLogin();
    loadTenants();
    route();
  });
  $('#sign-out').addEventListener('click', () => showLogin(''));
  window.addEventListener('hashchange', () => {
    if (location.hash.includes('token=')) takeTokenFromUrl();
    route();
  });
  loadTenants();
  route();
}

start();
