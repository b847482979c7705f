// Small charts: bytes-by-dtype bars (DOM), a histogram and a heat map (canvas).

import { formatBytes } from "./model.js";

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

export function dtypeBars(container, dtypes) {
  container.replaceChildren();
  const max = Math.max(1, ...dtypes.map(([, bytes]) => bytes));
  for (const [dtype, bytes] of dtypes) {
    const label = document.createElement("span");
    label.className = "mono";
    label.textContent = dtype;
    const track = document.createElement("div");
    const bar = document.createElement("div");
    bar.className = "bar";
    bar.style.width = `${(100 * bytes) / max}%`;
    bar.title = `${dtype}: ${bytes} bytes`;
    track.append(bar);
    const value = document.createElement("span");
    value.className = "num muted";
    value.textContent = formatBytes(bytes);
    container.append(label, track, value);
  }
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

function short(x) {
  if (x === null || x === undefined) return "–";
  const a = Math.abs(x);
  return a !== 0 && (a >= 1e5 || a < 1e-3) ? x.toExponential(2) : String(Number(x.toPrecision(4)));
}

export function drawHistogram(canvas, histogram) {
  const width = 360;
  const height = 140;
  const ctx = setup(canvas, width, height);
  const { edges, counts } = histogram;
  ctx.clearRect(0, 0, width, height);
  ctx.fillStyle = cssVar("--panel");
  ctx.fillRect(0, 0, width, height);
  const pad = { left: 6, right: 6, top: 8, bottom: 20 };
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
  ctx.strokeStyle = cssVar("--line");
  ctx.beginPath();
  ctx.moveTo(pad.left, pad.top + plotH + 0.5);
  ctx.lineTo(width - pad.right, pad.top + plotH + 0.5);
  ctx.stroke();
  ctx.fillStyle = cssVar("--muted");
  ctx.font = "11px system-ui, sans-serif";
  ctx.textBaseline = "bottom";
  ctx.textAlign = "left";
  ctx.fillText(short(edges[0]), pad.left, height - 2);
  ctx.textAlign = "right";
  ctx.fillText(short(edges[edges.length - 1]), width - pad.right, height - 2);
  ctx.textAlign = "center";
  ctx.fillText(`max bin ${max}`, width / 2, height - 2);
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

export function drawHeatmap(canvas, heatmap) {
  const grid = heatmap.values;
  const rows = grid.length;
  const cols = rows ? grid[0].length : 0;
  const cell = Math.max(2, Math.floor(192 / Math.max(rows, cols, 1)));
  const ctx = setup(canvas, cols * cell, rows * cell);
  const min = heatmap.min ?? 0;
  const max = heatmap.max ?? 0;
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const [red, green, blue] = color(grid[r][c], min, max);
      ctx.fillStyle = `rgb(${red},${green},${blue})`;
      ctx.fillRect(c * cell, r * cell, cell, cell);
    }
  }
  canvas.title = `${heatmap.rows}×${heatmap.cols} shown as ${rows}×${cols} block means; range ${short(min)} … ${short(max)}`;
}
