// @ts-check
// DOM helpers: elements are built from properties and children; strings become text nodes
// (text from the API never reaches the page as markup).

// DOM helpers: elements are built from properties and children; strings become text nodes.

export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'testid') el.dataset.testid = v;
    else if (k === 'data') Object.assign(el.dataset, v);
    else if (k === 'text') el.textContent = String(v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (['value', 'checked', 'disabled', 'selected', 'hidden', 'required', 'readOnly'].includes(k)) el[k] = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  add(el, children);
  return el;
}

export function add(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

export function $(sel, root = document) {
  return root.querySelector(sel);
}

/** What each row was rendered from (rows are re-rendered only when it changes). */
const rowSigs = new WeakMap();

/** Keeps one `<tr>` per key in `tbody`, re-rendering a row only when its item changed. */
export function syncRows(tbody, items, keyOf, render) {
  const old = new Map();
  for (const tr of tbody.children) old.set(tr.dataset.key, tr);
  let prev = null;
  for (const item of items) {
    const key = String(keyOf(item));
    const sig = JSON.stringify(item);
    let tr = old.get(key);
    if (!tr || rowSigs.get(tr) !== sig) {
      const fresh = render(item);
      fresh.dataset.key = key;
      rowSigs.set(fresh, sig);
      if (tr) tr.replaceWith(fresh);
      tr = fresh;
    }
    old.delete(key);
    const want = prev ? prev.nextSibling : tbody.firstChild;
    if (want !== tr) tbody.insertBefore(tr, want);
    prev = tr;
  }
  for (const tr of old.values()) tr.remove();
}

export function table(testid, headers) {
  const tbody = h('tbody');
  const el = h('div', { class: 'table-wrap' },
    h('table', { class: 'table', testid },
      h('thead', null, h('tr', null, headers.map((x) => h('th', { class: x.cls || null }, x.label ?? x)))),
      tbody));
  const empty = h('p', { class: 'empty', hidden: true });
  el.append(empty);
  return {
    el,
    tbody,
    setEmpty(message) {
      empty.hidden = !message;
      empty.textContent = message || '';
    },
  };
}
