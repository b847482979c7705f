// Small charts: stored bytes by dtype (one stacked bar and a legend, DOM), a histogram with
// axes and a heat map with a colour legend (canvas).

import { formatBytes } from "./model.js";

const PALETTE = ["#3b82f6", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#06b6d4", "#ec4899", "#84cc16",
  "#f97316", "#6366f1", "#14b8a6", "#a855f7"];

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

/** One line of bar, one or two of legend, whatever the number of dtypes (the table keeps its room). */
export function dtypeBars(container, dtypes) {
  container.replaceChildren();
  const total = dtypes.reduce((sum, [, bytes]) => sum + bytes, 0);
  if (!total) return;
  const bar = document.createElement("div");
  bar.className = "stack";
  const legend = document.createElement("div");
  legend.className = "legend";
  dtypes.forEach(([dtype, bytes], i) => {
    const colour = PALETTE[i % PALETTE.length];
    const part = document.createElement("span");
    part.style.flexGrow = String(bytes);
    part.style.background = colour;
    part.title = `${dtype}: ${formatBytes(bytes)} (${((100 * bytes) / total).toFixed(1)}%)`;
    bar.append(part);
    const item = document.createElement("span");
    item.className = "legend-item";
    item.dataset.testid = "dtype-item";
    const swatch = document.createElement("i");
    swatch.style.background = colour;
    const label = document.createElement("span");
    label.className = "mono";
    label.textContent = dtype;
    const value = document.createElement("span");
    value.className = "muted";
    value.textContent = formatBytes(bytes);
    item.append(swatch, label, " ", value);
    legend.append(item);
  });
  container.append(bar, legend);
}

function setup(canvas, width, height) {
  const ratio = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  return ctx;
}

export function short(x) {
  if (x === null || x === undefined) return "–";
  const a = Math.abs(x);
  return a !== 0 && (a >= 1e5 || a < 1e-3) ? x.toExponential(2) : String(Number(x.toPrecision(4)));
}

function compactCount(n) {
  if (n >= 1e6) return `${Number((n / 1e6).toPrecision(3))}M`;
  if (n >= 1e4) return `${Number((n / 1e3).toPrecision(3))}k`;
  return String(n);
}

function chartWidth(canvas) {
  const box = canvas.parentElement ? canvas.parentElement.clientWidth : 360;
  return Math.max(220, Math.min(420, box - 2));
}

export function drawHistogram(canvas, histogram) {
  const width = chartWidth(canvas);
  const height = 160;
  const ctx = setup(canvas, width, height);
  const { edges, counts } = histogram;
  ctx.clearRect(0, 0, width, height);
  ctx.fillStyle = cssVar("--panel");
  ctx.fillRect(0, 0, width, height);
  const pad = { left: 40, right: 8, top: 10, bottom: 34 };
  const plotW = width - pad.left - pad.right;
  const plotH = height - pad.top - pad.bottom;
  const max = Math.max(1, ...counts);
  const barW = plotW / counts.length;
  ctx.fillStyle = cssVar("--bar");
  counts.forEach((count, i) => {
    if (!count) return;
    const h = Math.max(1, (plotH * count) / max);
    ctx.fillRect(pad.left + i * barW + 0.5, pad.top + plotH - h, Math.max(1, barW - 1), h);
  });
  ctx.strokeStyle = cssVar("--muted");
  ctx.beginPath();
  ctx.moveTo(pad.left - 0.5, pad.top);
  ctx.lineTo(pad.left - 0.5, pad.top + plotH + 0.5);
  ctx.lineTo(width - pad.right, pad.top + plotH + 0.5);
  ctx.stroke();
  ctx.fillStyle = cssVar("--muted");
  ctx.font = "11px system-ui, sans-serif";
  // y axis: count ticks at 0, half and max
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (const value of [0, Math.round(max / 2), max]) {
    const y = pad.top + plotH - (plotH * value) / max;
    ctx.fillText(compactCount(value), pad.left - 5, y);
    ctx.beginPath();
    ctx.moveTo(pad.left - 3, y + 0.5);
    ctx.lineTo(pad.left, y + 0.5);
    ctx.stroke();
  }
  // x axis: value range
  ctx.textBaseline = "top";
  ctx.textAlign = "left";
  ctx.fillText(short(edges[0]), pad.left, pad.top + plotH + 4);
  ctx.textAlign = "right";
  ctx.fillText(short(edges[edges.length - 1]), width - pad.right, pad.top + plotH + 4);
  ctx.textAlign = "center";
  ctx.fillText("value", pad.left + plotW / 2, pad.top + plotH + 4);
  ctx.fillText("count per bin ↑", pad.left + plotW / 2, height - 13);
}

// blue (negative) - neutral - red (positive) when the range spans zero, else a light-to-dark ramp
function color(value, min, max) {
  if (value === null) return [128, 128, 128];
  if (min < 0 && max > 0) {
    const m = Math.max(-min, max);
    const t = Math.max(-1, Math.min(1, value / m));
    const s = Math.abs(t);
    return t < 0
      ? [Math.round(245 - 200 * s), Math.round(245 - 140 * s), 245]
      : [245, Math.round(245 - 170 * s), Math.round(245 - 200 * s)];
  }
  const t = max > min ? (value - min) / (max - min) : 0.5;
  return [Math.round(250 - 200 * t), Math.round(250 - 150 * t), Math.round(255 - 90 * t)];
}

/**
 * The block-mean grid fills the chart's width; cells may be taller than wide so that a matrix of
 * few rows (a 4-D weight seen as rows × the rest) is a readable block, not a strip. A colour bar
 * below gives the scale.
 */
export function drawHeatmap(canvas, heatmap) {
  const grid = heatmap.values;
  const rows = grid.length;
  const cols = rows ? grid[0].length : 0;
  const width = Math.min(chartWidth(canvas), 320);
  const cellW = width / Math.max(cols, 1);
  const n = Math.max(rows, 1);
  const cellH = Math.min(Math.max(cellW, 96 / n), 240 / n); // at least 96 px tall, at most 240
  const mapH = Math.ceil(rows * cellH);
  const legendH = 34;
  const ctx = setup(canvas, width, mapH + legendH);
  const min = heatmap.min ?? 0;
  const max = heatmap.max ?? 0;
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const [red, green, blue] = color(grid[r][c], min, max);
      ctx.fillStyle = `rgb(${red},${green},${blue})`;
      ctx.fillRect(c * cellW, r * cellH, Math.ceil(cellW), Math.ceil(cellH));
    }
  }
  // legend: the colour scale from min to max, zero marked when the range spans it
  const top = mapH + 8;
  const lo = min < 0 && max > 0 ? -Math.max(-min, max) : min;
  const hi = min < 0 && max > 0 ? Math.max(-min, max) : max;
  for (let x = 0; x < width; x++) {
    const [red, green, blue] = color(lo + ((hi - lo) * x) / Math.max(1, width - 1), min, max);
    ctx.fillStyle = `rgb(${red},${green},${blue})`;
    ctx.fillRect(x, top, 1, 8);
  }
  ctx.fillStyle = cssVar("--muted");
  ctx.font = "11px system-ui, sans-serif";
  ctx.textBaseline = "top";
  ctx.textAlign = "left";
  ctx.fillText(short(lo), 0, top + 11);
  ctx.textAlign = "right";
  ctx.fillText(short(hi), width, top + 11);
  if (lo < 0 && hi > 0) {
    ctx.textAlign = "center";
    ctx.fillText("0", width / 2, top + 11);
  }
  canvas.title = `${heatmap.rows} × ${heatmap.cols} shown as ${rows} × ${cols} block means; range ${short(min)} … ${short(max)}`;
}
