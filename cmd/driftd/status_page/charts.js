// Charts shared by the status page and `driftd report` (both inline this file): SVG drawn from
// plain data, nothing loaded from elsewhere. Times are milliseconds since the epoch, shown in
// UTC. Every mark a test or a person needs to identify carries a class and data- attributes.
"use strict";
const SVG_NS = "http://www.w3.org/2000/svg";
const LEVEL_COLORS = { ok: "#2e7d32", warn: "#f9a825", alert: "#c62828", resolved: "#2e7d32" };

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") e.className = v;
    else if (k === "onclick") e.onclick = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// A number as a person reads it: 3 significant digits below 100, no 16-digit floats.
function fmtNum(x) {
  if (x === null || x === undefined || !Number.isFinite(x)) return "-";
  const a = Math.abs(x);
  if (a >= 1e6) return (x / 1e6).toFixed(1) + "M";
  if (a >= 1e4) return (x / 1e3).toFixed(1) + "k";
  if (a >= 100) return x.toFixed(0);
  if (a >= 1) return x.toFixed(2);
  if (a === 0) return "0";
  return x.toPrecision(3);
}

// A calibrated score as a cell shows it: one decimal.
function fmtScore(x) { return Number.isFinite(x) ? x.toFixed(1) : "-"; }

function parseTime(iso) { return iso ? Date.parse(iso) : null; }
function pad2(n) { return String(n).padStart(2, "0"); }
// "2023-11-14 22:13:20 UTC" (seconds dropped when `short`).
function fmtTime(ms, short) {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "-";
  const d = new Date(ms);
  const day = `${d.getUTCFullYear()}-${pad2(d.getUTCMonth() + 1)}-${pad2(d.getUTCDate())}`;
  const time = `${pad2(d.getUTCHours())}:${pad2(d.getUTCMinutes())}` +
               (short ? "" : `:${pad2(d.getUTCSeconds())}`);
  return `${day} ${time}${short ? "" : " UTC"}`;
}
// "3h 12m", "45s": how long since `ms`, against `now`.
function fmtAge(ms, now) {
  if (!Number.isFinite(ms) || !Number.isFinite(now)) return "";
  let s = Math.max(0, Math.round((now - ms) / 1000));
  if (s >= 86400) return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
  if (s >= 3600) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  if (s >= 60) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${s}s`;
}

// Round tick values between lo and hi, about `count` of them.
function niceTicks(lo, hi, count) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map(m => m * mag).find(s => s >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
    out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  }
  return out;
}
const TIME_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5, 6e5, 9e5, 18e5, 36e5, 72e5,
                    108e5, 216e5, 432e5, 864e5, 1728e5, 6048e5];
function timeTicks(lo, hi, count) {
  const raw = (hi - lo) / count;
  const step = TIME_STEPS.find(s => s >= raw) || TIME_STEPS[TIME_STEPS.length - 1];
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi; t += step) out.push(t);
  return { ticks: out, step };
}
function fmtTick(t, step, spanDays) {
  const d = new Date(t);
  const hm = `${pad2(d.getUTCHours())}:${pad2(d.getUTCMinutes())}`;
  const withSeconds = step < 1e3 ? `${hm}:${pad2(d.getUTCSeconds())}.${String(d.getUTCMilliseconds()).padStart(3, "0")}`
                    : step < 6e4 ? `${hm}:${pad2(d.getUTCSeconds())}` : hm;
  if (step >= 864e5 || spanDays >= 2) return `${pad2(d.getUTCMonth() + 1)}-${pad2(d.getUTCDate())} ${hm}`;
  return withSeconds;
}

// A chart over time.
//   series: [{name, color, points: [{t, y, level}], dots}]  (t: ms or null; y: number)
//   lines:  [{name, color, points: [{t, y}]}]  drawn as steps, dashed: thresholds
//   bands:  [{name, color, points: [{t, lo, hi}]}]  shaded: a confidence band
// Without times (every t null) the x axis counts windows.
function timeChart(opts) {
  const W = opts.width || 720, H = opts.height || 240;
  const L = 56, R = 84, T = 12, B = 34;
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("class", "time-chart");
  const add = (tag, attrs, text, parent) => {
    const e = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    (parent || svg).append(e);
    return e;
  };
  const all = [];
  for (const s of opts.series || []) for (const p of s.points) all.push(p);
  for (const l of opts.lines || []) for (const p of l.points) all.push(p);
  for (const b of opts.bands || []) for (const p of b.points) all.push({ t: p.t, y: p.lo }, { t: p.t, y: p.hi });
  // A time axis when every point has a time and each series' times increase; windows closed
  // at one instant (a replay read in one batch, stamped by the processing clock) are drawn in
  // their order instead, not piled on one x.
  const increasing = pts => pts.every((p, i) => i === 0 || p.t > pts[i - 1].t);
  const timed = all.length > 0 && all.every(p => Number.isFinite(p.t)) &&
                (opts.series || []).every(s => increasing(s.points));
  // Without times: index positions, taken from the first series.
  const index = new Map();
  if (!timed) {
    let i = 0;
    for (const s of opts.series || []) for (const p of s.points) if (!index.has(p)) index.set(p, i++);
  }
  const xs = timed ? all.map(p => p.t) : [0, Math.max(1, index.size - 1)];
  let x0 = Math.min(...xs), x1 = Math.max(...xs);
  if (!(x1 > x0)) { x0 -= timed ? 30000 : 1; x1 += timed ? 30000 : 1; }
  const ys = all.map(p => p.y).filter(Number.isFinite);
  let y0 = Math.min(0, ...ys), y1 = Math.max(...ys, 0);
  if (opts.yMin !== undefined) y0 = Math.min(y0, opts.yMin);
  if (opts.yMax !== undefined) y1 = Math.max(y1, opts.yMax);
  if (!(y1 > y0)) y1 = y0 + 1;
  const pad = (y1 - y0) * 0.08;
  y1 += pad;
  if (y0 < 0) y0 -= pad;
  const px = v => L + (v - x0) * (W - L - R) / (x1 - x0);
  const py = v => H - B - (v - y0) * (H - T - B) / (y1 - y0);
  const xOf = p => px(timed ? p.t : index.get(p) ?? 0);
  svg.dataset.timed = timed ? "true" : "false";

  // Axes: y ticks with their values, x ticks with times (UTC) or window numbers.
  for (const v of niceTicks(y0, y1, 5)) {
    add("line", { x1: L, x2: W - R, y1: py(v).toFixed(2), y2: py(v).toFixed(2), stroke: v === 0 ? "#90a4ae" : "#eceff1",
                  class: "y-grid", "data-value": v });
    add("text", { x: L - 4, y: py(v) + 3, "font-size": 10, fill: "#607d8b", "text-anchor": "end", class: "y-tick" }, fmtNum(v));
  }
  if (timed) {
    const { ticks, step } = timeTicks(x0, x1, 6);
    const spanDays = (x1 - x0) / 864e5;
    for (const t of ticks) {
      add("line", { x1: px(t), x2: px(t), y1: T, y2: H - B, stroke: "#f5f5f5" });
      add("text", { x: px(t), y: H - B + 13, "font-size": 10, fill: "#607d8b", "text-anchor": "middle",
                    class: "x-tick", "data-time": new Date(t).toISOString() }, fmtTick(t, step, spanDays));
    }
    add("text", { x: L, y: H - 4, "font-size": 10, fill: "#607d8b", class: "x-axis-label" },
        `${opts.xLabel || "window end"} (UTC), ${fmtTime(x0, true)} to ${fmtTime(x1, true)}`);
  } else {
    for (const v of niceTicks(x0, x1, 6)) {
      if (!Number.isInteger(v)) continue;
      add("text", { x: px(v), y: H - B + 13, "font-size": 10, fill: "#607d8b", "text-anchor": "middle", class: "x-tick",
                    "data-window": v + 1 }, `#${v + 1}`);
    }
    const times = all.map(p => p.t).filter(Number.isFinite);
    add("text", { x: L, y: H - 4, "font-size": 10, fill: "#607d8b", class: "x-axis-label" },
        times.length ? `window, in order (closed together, to ${fmtTime(Math.max(...times))})`
                     : "window, in order (the values carry no time)");
  }
  add("line", { x1: L, x2: L, y1: T, y2: H - B, stroke: "#90a4ae" });
  if (opts.yLabel) {
    add("text", { x: 12, y: T + (H - T - B) / 2, "font-size": 10, fill: "#607d8b", "text-anchor": "middle",
                  transform: `rotate(-90 12 ${T + (H - T - B) / 2})`, class: "y-axis-label" }, opts.yLabel);
  }

  for (const b of opts.bands || []) {
    const pts = b.points.filter(p => Number.isFinite(p.lo) && Number.isFinite(p.hi));
    if (!pts.length) continue;
    const top = pts.map((p, i) => `${i ? "L" : "M"}${xOf(p).toFixed(1)},${py(p.hi).toFixed(1)}`).join(" ");
    const bottom = pts.slice().reverse().map(p => `L${xOf(p).toFixed(1)},${py(p.lo).toFixed(1)}`).join(" ");
    add("path", { d: `${top} ${bottom} Z`, fill: b.color, "fill-opacity": 0.18, stroke: "none", class: "band",
                  "data-name": b.name });
    for (const p of pts) {
      add("line", { x1: xOf(p), x2: xOf(p), y1: py(p.lo), y2: py(p.hi), stroke: b.color, "stroke-opacity": 0.6,
                    class: "band-range", "data-lo": p.lo, "data-hi": p.hi });
    }
  }
  for (const l of opts.lines || []) {
    const pts = l.points.filter(p => Number.isFinite(p.y));
    if (!pts.length) continue;
    // Steps: a threshold holds from one window to the next (it moves with the sample sizes).
    let d = "";
    pts.forEach((p, i) => {
      const x = xOf(p), y = py(p.y);
      if (i === 0) d += `M${(pts.length === 1 ? L : x).toFixed(1)},${y.toFixed(1)}`;
      else d += ` H${x.toFixed(1)} V${y.toFixed(1)}`;
    });
    d += ` H${(W - R).toFixed(1)}`;
    const last = pts[pts.length - 1];
    add("path", { d, fill: "none", stroke: l.color, "stroke-dasharray": "6 4", "stroke-width": 1.5,
                  class: "threshold", "data-level": l.name, "data-value": last.y, "data-y": py(last.y).toFixed(2) });
    add("text", { x: W - R + 4, y: py(last.y) + 3, "font-size": 10, fill: l.color, class: "threshold-label",
                  "data-level": l.name }, `${l.name} ${fmtNum(last.y)}`);
  }
  for (const s of opts.series || []) {
    const pts = s.points.filter(p => Number.isFinite(p.y));
    if (!pts.length) continue;
    const d = pts.map((p, i) => `${i ? "L" : "M"}${xOf(p).toFixed(1)},${py(p.y).toFixed(1)}`).join(" ");
    add("path", { d, fill: "none", stroke: s.color, "stroke-width": 2, class: "line", "data-name": s.name });
    for (const p of pts) {
      const c = add("circle", { cx: xOf(p).toFixed(1), cy: py(p.y).toFixed(1), r: 3,
                                fill: s.dots === false ? s.color : (LEVEL_COLORS[p.level] || s.color),
                                class: "point", "data-name": s.name, "data-value": p.y,
                                "data-level": p.level, "data-time": Number.isFinite(p.t) ? new Date(p.t).toISOString() : null });
      add("title", {}, `${s.name} ${fmtNum(p.y)}${p.level ? " (" + p.level + ")" : ""}${Number.isFinite(p.t) ? " at " + fmtTime(p.t) : ""}`, c);
    }
  }
  return svg;
}

// Two distributions side by side: for each bin or category, the baseline's share and the
// window's. cells: [{label, baseline, window}] (counts).
function distributionChart(cells, opts) {
  opts = opts || {};
  const W = opts.width || 720, H = opts.height || 200, L = 44, B = 46, T = 10, R = 10;
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("class", "distribution-chart");
  const add = (tag, attrs, text, parent) => {
    const e = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    (parent || svg).append(e);
    return e;
  };
  const nb = cells.reduce((a, c) => a + c.baseline, 0) || 1;
  const nw = cells.reduce((a, c) => a + c.window, 0) || 1;
  const shares = cells.map(c => ({ label: c.label, b: c.baseline / nb, w: c.window / nw }));
  const top = Math.max(0.01, ...shares.map(s => Math.max(s.b, s.w))) * 1.1;
  const py = v => H - B - v * (H - T - B) / top;
  for (const v of niceTicks(0, top, 4)) {
    add("line", { x1: L, x2: W - R, y1: py(v), y2: py(v), stroke: "#eceff1" });
    add("text", { x: L - 4, y: py(v) + 3, "font-size": 10, fill: "#607d8b", "text-anchor": "end" }, `${Math.round(v * 100)}%`);
  }
  const slot = (W - L - R) / Math.max(1, shares.length);
  const bw = Math.max(2, slot * 0.38);
  shares.forEach((s, i) => {
    const x = L + i * slot + slot * 0.1;
    const b = add("rect", { x: x.toFixed(1), y: py(s.b).toFixed(1), width: bw.toFixed(1), height: (py(0) - py(s.b)).toFixed(1),
                            fill: "#90a4ae", class: "bar baseline", "data-cell": s.label, "data-share": s.b.toFixed(4) });
    add("title", {}, `${s.label}: baseline ${(s.b * 100).toFixed(1)}%`, b);
    const w = add("rect", { x: (x + bw).toFixed(1), y: py(s.w).toFixed(1), width: bw.toFixed(1), height: (py(0) - py(s.w)).toFixed(1),
                            fill: "#1565c0", class: "bar window", "data-cell": s.label, "data-share": s.w.toFixed(4) });
    add("title", {}, `${s.label}: current window ${(s.w * 100).toFixed(1)}%`, w);
    const label = s.label.length > 14 ? s.label.slice(0, 13) + "…" : s.label;
    add("text", { x: x + bw, y: H - B + 12, "font-size": 9, fill: "#455a64", "text-anchor": "end",
                  transform: `rotate(-30 ${x + bw} ${H - B + 12})`, class: "cell-label" }, label);
  });
  add("line", { x1: L, x2: W - R, y1: py(0), y2: py(0), stroke: "#90a4ae" });
  const legend = add("g", { class: "legend" });
  add("rect", { x: W - R - 210, y: T, width: 10, height: 10, fill: "#90a4ae" }, undefined, legend);
  add("text", { x: W - R - 196, y: T + 9, "font-size": 10, fill: "#455a64" }, `baseline (n ${fmtNum(nb)})`, legend);
  add("rect", { x: W - R - 110, y: T, width: 10, height: 10, fill: "#1565c0" }, undefined, legend);
  add("text", { x: W - R - 96, y: T + 9, "font-size": 10, fill: "#455a64" }, `current (n ${fmtNum(nw)})`, legend);
  return svg;
}

// A distribution's cells from the JSON (bins with null ends, or categories).
function distributionCells(distribution) {
  return (distribution || []).map(c => ({
    label: c.category !== undefined ? c.category
         : c.lower === null ? `< ${fmtNum(c.upper)}`
         : c.upper === null ? `≥ ${fmtNum(c.lower)}`
         : `${fmtNum(c.lower)} – ${fmtNum(c.upper)}`,
    baseline: c.baseline, window: c.window }));
}

// The reading of `detector` in a point's detectors, or undefined.
function readingOf(point, detector) { return (point.detectors || []).find(d => d.detector === detector); }

// A series' statistic over time against its thresholds, in the statistic's own units.
function statisticChart(points, detector, height) {
  const evaluated = points.filter(p => p.evaluated && readingOf(p, detector));
  const at = p => parseTime(p.windowEnd);
  const readings = evaluated.map(p => ({ p, r: readingOf(p, detector) }));
  return timeChart({
    height: height || 240,
    yLabel: `${detector} statistic`,
    series: [{ name: detector, color: "#1565c0", points: readings.map(({ p, r }) => ({ t: at(p), y: r.statistic, level: r.level })) }],
    lines: [
      { name: "warn", color: "#f9a825", points: readings.map(({ p, r }) => ({ t: at(p), y: r.warn_threshold })) },
      { name: "alert", color: "#c62828", points: readings.map(({ p, r }) => ({ t: at(p), y: r.alert_threshold })) }],
  });
}
