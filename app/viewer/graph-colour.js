// The graph tab coloured by a per-tensor figure: the relative change (||a - b|| / ||a||) from another
// archive or version (GET /archives/{from}/compare/{this}), or a statistic the stats route gives (std,
// fraction of zeros, NaN + Inf count), so a changed, dead or exploded layer stands out. Weights are
// coloured by their own figure, module groups by the largest figure of the tensors under them; grey:
// no figure (added, retyped, unreadable). A legend gives the scale.

import { getJSON } from "./api.js";
import { short } from "./charts.js";

const $ = (id) => document.getElementById(id);
const enc = encodeURIComponent;
const FIGURES = {
  change: "relative change from…",
  std: "std",
  zeros: "fraction of zeros",
  naninf: "NaN + Inf count",
};
const state = { values: new Map(), scale: null, token: 0 };

function control() {
  const toolbar = document.querySelector("#graph-pane .toolbar");
  const wrap = document.createElement("span");
  wrap.className = "graph-colour";
  const label = document.createElement("label");
  label.textContent = "colour ";
  const figure = document.createElement("select");
  figure.id = "graph-colour";
  figure.dataset.testid = "graph-colour";
  figure.append(new Option("none", ""), ...Object.entries(FIGURES).map(([key, text]) => new Option(text, key)));
  label.append(figure);
  const from = document.createElement("select");
  from.id = "graph-colour-from";
  from.dataset.testid = "graph-colour-from";
  from.hidden = true;
  from.setAttribute("aria-label", "relative change from");
  const legend = document.createElement("span");
  legend.id = "graph-legend";
  legend.className = "graph-legend";
  legend.dataset.testid = "graph-legend";
  wrap.append(label, from, legend);
  toolbar.append(wrap);
  figure.addEventListener("change", () => load());
  from.addEventListener("change", () => load());
}

async function fillFrom() {
  const from = $("graph-colour-from");
  if (from.options.length) return;
  const listing = await getJSON("/archives");
  for (const archive of listing.archives) {
    from.append(new Option(archive.id, archive.id));
    for (const version of [archive.version, ...(archive.retiring || [])]) {
      if (version) from.append(new Option(`${archive.id}@${version}`, `${archive.id}@${version}`));
    }
  }
}

async function load() {
  const figure = $("graph-colour").value;
  const token = ++state.token;
  state.values = new Map();
  state.scale = null;
  $("graph-colour-from").hidden = figure !== "change";
  const archive = $("archive").value;
  const model = $("model").value;
  const query = model ? `?model=${enc(model)}` : "";
  const legend = $("graph-legend");
  legend.textContent = figure ? "loading…" : "";
  try {
    if (figure === "change") {
      await fillFrom();
      const from = $("graph-colour-from").value;
      const diff = await getJSON(`/archives/${enc(from)}/compare/${enc(archive)}${query}`);
      for (const t of diff.tensors) {
        state.values.set(t.name, t.status === "same" || t.status === "moved" ? 0 : t.figures ? t.figures.relative_l2 : null);
      }
    } else if (figure) {
      const listing = await getJSON(`/archives/${enc(archive)}/tensors${query}`);
      const names = listing.tensors.filter((t) => !t.unsupported && t.numel).map((t) => t.name);
      let done = 0;
      const next = async () => {
        while (names.length && token === state.token) {
          const name = names.shift();
          const stats = await getJSON(`/archives/${enc(archive)}/tensors/${enc(name)}/stats${query}`);
          state.values.set(name, figureOf(stats, figure));
          legend.textContent = `${++done} tensors…`;
        }
      };
      await Promise.all([next(), next(), next(), next()]);
    }
  } catch (err) {
    if (token === state.token) legend.textContent = err.message;
    return;
  }
  if (token !== state.token) return;
  const known = [...state.values.values()].filter((v) => v !== null && Number.isFinite(v));
  state.scale = known.length ? { min: Math.min(...known), max: Math.max(...known) } : null;
  drawLegend(figure);
  apply();
}

function figureOf(stats, figure) {
  if (figure === "std") return stats.std;
  if (figure === "zeros") return stats.sample_elements ? stats.zero_count / stats.sample_elements : null;
  return stats.nan_count + stats.inf_count;
}

function colour(value) {
  if (value === null || value === undefined || !state.scale) return "rgb(170,170,170)";
  const { min, max } = state.scale;
  const t = max > min ? (value - min) / (max - min) : 0;
  return `rgb(255,${Math.round(245 - 200 * t)},${Math.round(235 - 215 * t)})`;
}

function drawLegend(figure) {
  const legend = $("graph-legend");
  legend.replaceChildren();
  if (!figure || !state.scale) {
    if (figure) legend.textContent = "no figures";
    return;
  }
  const low = document.createElement("span");
  low.textContent = short(state.scale.min);
  const bar = document.createElement("span");
  bar.className = "legend-bar";
  bar.style.background = `linear-gradient(to right, ${colour(state.scale.min)}, ${colour(state.scale.max)})`;
  const high = document.createElement("span");
  high.textContent = short(state.scale.max);
  const grey = document.createElement("span");
  grey.className = "muted";
  grey.textContent = "grey: no figure";
  legend.append(`${FIGURES[figure].replace("…", "")}: `, low, bar, high, grey);
}

function apply() {
  const svg = $("graph-svg");
  const on = $("graph-colour").value && state.scale;
  for (const node of svg.querySelectorAll("[data-tensor]")) {
    const rect = node.querySelector("rect");
    if (rect) rect.style.fill = on ? colour(state.values.get(node.dataset.tensor)) : "";
    node.dataset.colourValue = on ? String(state.values.get(node.dataset.tensor) ?? "") : "";
  }
  for (const group of svg.querySelectorAll("[data-module]")) {
    const rect = group.querySelector("rect");
    if (!rect) continue;
    let top = null;
    if (on) {
      const prefix = `${group.dataset.module}.`;
      for (const [name, value] of state.values) {
        if (name.startsWith(prefix) && value !== null && (top === null || value > top)) top = value;
      }
    }
    rect.style.fill = on && top !== null ? colour(top) : "";
    group.dataset.colourValue = on && top !== null ? String(top) : "";
  }
}

control();
let pending = false;
new MutationObserver(() => {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => {
    pending = false;
    if ($("graph-colour").value) apply();
  });
}).observe($("graph-svg"), { childList: true, subtree: true });
$("archive").addEventListener("change", () => $("graph-colour").value && load());
$("model").addEventListener("change", () => $("graph-colour").value && load());
