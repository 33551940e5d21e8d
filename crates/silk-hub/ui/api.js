// @ts-check
// The token, calls to the hub's REST API (`/api/v1`), the error line, polling and button
// actions.

import { $ } from './dom.js';

const POLL_MS = 2000;
const TOKEN_KEY = 'silk.token';
const TENANT_KEY = 'silk.tenant';
// ---------------------------------------------------------------------------------------------
// Token, API calls, the error line.

function getToken() {
  try {
    return localStorage.getItem(TOKEN_KEY) || '';
  } catch {
    return '';
  }
}

export function setToken(token) {
  // A new token starts in its own tenant.
  setTenant('');
  try {
    if (token) localStorage.setItem(TOKEN_KEY, token);
    else localStorage.removeItem(TOKEN_KEY);
  } catch {
    // Storage disabled: the token lives for this page only.
  }
  memoryToken = token;
  $('#sign-out').hidden = !token;
}

let memoryToken = '';

export function token() {
  return getToken() || memoryToken;
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** What happens when the hub refuses the token (the app shows its sign-in box). */
let unauthorized = (/** @type {string} */ _message) => {};

/** Sets what happens when the hub refuses the token. */
export function onUnauthorized(/** @type {(message: string) => void} */ handler) {
  unauthorized = handler;
}

/** The tenant an admin acts in (`X-Silk-Tenant`); '' for the token's own. */
export function tenant() {
  try {
    return localStorage.getItem(TENANT_KEY) || '';
  } catch {
    return memoryTenant;
  }
}

let memoryTenant = '';

export function setTenant(/** @type {string} */ name) {
  memoryTenant = name;
  try {
    if (name) localStorage.setItem(TENANT_KEY, name);
    else localStorage.removeItem(TENANT_KEY);
  } catch {
    // Storage disabled: the choice lives for this page only.
  }
}

export function authHeaders(extra) {
  const headers = { ...extra };
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  const chosen = tenant();
  if (chosen) headers['X-Silk-Tenant'] = chosen;
  return headers;
}

export async function errorOf(resp) {
  let code = 'http';
  let message = `${resp.status} ${resp.statusText || 'error'}`.trim();
  try {
    const body = await resp.json();
    if (body && typeof body.message === 'string' && body.message) {
      message = body.message;
      if (typeof body.code === 'string') code = body.code;
    }
  } catch {
    // Not JSON: the status line says it.
  }
  if (resp.status === 401) {
    unauthorized(`The hub refused the token: ${message}`);
    const e = new ApiError(401, code, message);
    e.silent = true;
    return e;
  }
  return new ApiError(resp.status, code, message);
}

/**
 * Calls the hub's API; its JSON answer (`null` for 204). Fails with an `ApiError` carrying
 * the API's code and message.
 * @param {string} method
 * @param {string} path
 * @param {unknown} [body]
 * @returns {Promise<any>}
 */
export async function api(method, path, body) {
  const init = { method, headers: authHeaders({ Accept: 'application/json' }), cache: 'no-store' };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, 'network', `Cannot reach the hub (${e.message || e}).`);
  }
  if (!resp.ok) throw await errorOf(resp);
  if (resp.status === 204) return null;
  const text = await resp.text();
  return text ? JSON.parse(text) : null;
}

export const enc = encodeURIComponent;

let errorSource = null;

export function showError(e, source = 'action') {
  if (e && e.silent) return;
  const line = $('#error');
  line.textContent = e instanceof Error ? e.message : String(e);
  line.hidden = false;
  errorSource = source;
  if (source === 'poll') setLive(e && e.status === 0 ? 'offline' : 'error');
}

export function clearError(source) {
  if (source && errorSource !== source) return;
  const line = $('#error');
  line.hidden = true;
  line.textContent = '';
  errorSource = null;
}

export function setLive(state) {
  const el = $('#live');
  el.className = `live live-${state}`;
  el.textContent = state;
}

/** Calls `fn` now and every `ms` after it settles, except while the tab is hidden. */
export function poll(fn, ms = POLL_MS) {
  let timer = null;
  let stopped = false;
  let busy = false;
  const tick = async () => {
    timer = null;
    if (stopped || busy) return;
    if (document.hidden) {
      setLive('paused');
      return;
    }
    busy = true;
    try {
      await fn();
      clearError('poll');
      setLive('live');
    } catch (e) {
      if (!stopped) showError(e, 'poll');
    }
    busy = false;
    if (!stopped && !document.hidden) timer = setTimeout(tick, ms);
  };
  const onVisibility = () => {
    if (stopped) return;
    if (document.hidden) {
      if (timer) clearTimeout(timer);
      timer = null;
      setLive('paused');
    } else if (!timer && !busy) {
      tick();
    }
  };
  document.addEventListener('visibilitychange', onVisibility);
  tick();
  return () => {
    stopped = true;
    if (timer) clearTimeout(timer);
    document.removeEventListener('visibilitychange', onVisibility);
  };
}

/** Runs an action from a button: disables it meanwhile, shows the API's message on failure. */
export async function act(button, fn) {
  if (button) button.disabled = true;
  try {
    const out = await fn();
    clearError('action');
    return out;
  } catch (e) {
    showError(e);
    return undefined;
  } finally {
    if (button && button.isConnected) button.disabled = false;
  }
}
