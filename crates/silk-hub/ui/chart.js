// @ts-check
// Charts, drawn on <canvas> by hand.

import { fmtInt, fmtRate } from './format.js';

// Charts, drawn on <canvas> by hand.

export function cssVar(name, fallback) {
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return v || fallback;
}

function niceMax(x) {
  if (!(x > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(x));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= x) return m * p;
  return 10 * p;
}

function prepCanvas(canvas) {
  const dpr = window.devicePixelRatio || 1;
  const w = Math.max(1, canvas.clientWidth);
  const ht = Math.max(1, canvas.clientHeight);
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(ht * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(ht * dpr);
  }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, ht);
  return { ctx, w, h: ht };
}

/**
 * A time series chart: `points` are `{t, v}` (ms, value); `avg` an optional dashed level.
 * Axes: values on the left, clock time below; time runs from the first point over at least
 * `minSpan` ms, so that a live chart fills from the left.
 */
export function drawChart(canvas, points, { avg = null, unit = '', minSpan = 30_000 } = {}) {
  if (!canvas.isConnected) return;
  const { ctx, w, h: ht } = prepCanvas(canvas);
  const accent = cssVar('--accent', '#2563eb');
  const grid = cssVar('--border', '#e5e7eb');
  const muted = cssVar('--muted', '#6b7280');
  const pad = { l: 48, r: 14, t: 14, b: 26 };
  const iw = w - pad.l - pad.r;
  const ih = ht - pad.t - pad.b;
  ctx.font = '11px system-ui, sans-serif';
  const maxV = niceMax(Math.max(1, avg || 0, ...points.map((p) => p.v)) * 1.1);
  const t0 = points.length ? points[0].t : Date.now();
  const last = points.length ? points[points.length - 1].t : t0;
  const span = Math.max(minSpan, last - t0, 1000);
  canvas.dataset.points = String(points.length);
  const x = (t) => pad.l + ((t - t0) / span) * iw;
  const y = (v) => pad.t + ih - (v / maxV) * ih;

  ctx.strokeStyle = grid;
  ctx.fillStyle = muted;
  ctx.lineWidth = 1;
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  for (let i = 0; i <= 4; i += 1) {
    const v = (maxV * i) / 4;
    const yy = Math.round(y(v)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(pad.l, yy);
    ctx.lineTo(w - pad.r, yy);
    ctx.stroke();
    ctx.fillText(`${Number.isInteger(maxV / 4) ? fmtInt(v) : fmtRate(v)}${unit}`, pad.l - 6, yy);
  }
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  const ticks = Math.max(2, Math.min(6, Math.floor(iw / 110)));
  for (let i = 0; i <= ticks; i += 1) {
    const t = t0 + (span * i) / ticks;
    const label = new Date(t).toLocaleTimeString([], { hour12: false, hour: '2-digit', minute: '2-digit', second: '2-digit' });
    ctx.fillText(label, Math.min(Math.max(x(t), pad.l + 24), w - pad.r - 24), pad.t + ih + 7);
  }

  if (points.length < 2) {
    ctx.textAlign = 'center';
    ctx.textBaseline = 'middle';
    ctx.fillText('waiting for data…', pad.l + iw / 2, pad.t + ih * 0.375);
    return;
  }
  const grad = ctx.createLinearGradient(0, pad.t, 0, pad.t + ih);
  grad.addColorStop(0, `${accent}55`);
  grad.addColorStop(1, `${accent}05`);
  ctx.beginPath();
  ctx.moveTo(x(points[0].t), y(0));
  for (const p of points) ctx.lineTo(x(p.t), y(p.v));
  ctx.lineTo(x(points[points.length - 1].t), y(0));
  ctx.closePath();
  ctx.fillStyle = grad;
  ctx.fill();
  ctx.beginPath();
  points.forEach((p, i) => (i ? ctx.lineTo(x(p.t), y(p.v)) : ctx.moveTo(x(p.t), y(p.v))));
  ctx.strokeStyle = accent;
  ctx.lineWidth = 2;
  ctx.lineJoin = 'round';
  ctx.stroke();
  if (avg !== null && avg > 0) {
    ctx.setLineDash([5, 4]);
    ctx.strokeStyle = muted;
    ctx.lineWidth = 1;
    ctx.beginPath();
    ctx.moveTo(pad.l, y(avg));
    ctx.lineTo(w - pad.r, y(avg));
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillStyle = muted;
    ctx.textAlign = 'right';
    ctx.textBaseline = 'bottom';
    ctx.fillText(`average ${fmtRate(avg)}${unit}`, w - pad.r - 2, y(avg) - 3);
  }
}

/** A sparkline: no axes, the last value's area. */
export function drawSpark(canvas, values, color) {
  if (!canvas.isConnected) return;
  const { ctx, w, h: ht } = prepCanvas(canvas);
  if (values.length < 2) return;
  const max = niceMax(Math.max(1, ...values));
  const x = (i) => (i / (values.length - 1)) * (w - 2) + 1;
  const y = (v) => ht - 2 - (v / max) * (ht - 4);
  ctx.beginPath();
  ctx.moveTo(x(0), ht);
  values.forEach((v, i) => ctx.lineTo(x(i), y(v)));
  ctx.lineTo(x(values.length - 1), ht);
  ctx.closePath();
  ctx.fillStyle = `${color}22`;
  ctx.fill();
  ctx.beginPath();
  values.forEach((v, i) => (i ? ctx.lineTo(x(i), y(v)) : ctx.moveTo(x(i), y(v))));
  ctx.strokeStyle = color;
  ctx.lineWidth = 1.5;
  ctx.stroke();
}
