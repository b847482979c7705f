// The compare view (#/compare/<a>/<b>[/tensor/<name>]): two archives or two versions of one, side by
// side: the summary, modules ranked by relative change (bars; absolute where the old values are all
// zero), every tensor that differs in a table sortable by its figures, and for one tensor both heat
// maps and their difference (a - b), sampled as the stats route samples. Data: GET
// /archives/{a}/compare/{b} and .../tensors/{name}.

import { getJSON } from "./api.js";
import { drawHeatmap, short } from "./charts.js";

const $ = (id) => document.getElementById(id);
const enc = encodeURIComponent;
const view = { key: null, body: null, sort: "relative_l2", descending: true };

function parse() {
  const match = location.hash.match(/^#\/compare\/([^/]*)\/([^/]*)(?:\/tensor\/(.+))?$/);
  if (!location.hash.startsWith("#/compare/")) return null;
  if (!match) return { a: null, b: null, tensor: null };
  return { a: decodeURIComponent(match[1]), b: decodeURIComponent(match[2]), tensor: match[3] ? decodeURIComponent(match[3]) : null };
}

const hashFor = (a, b, tensor = null) => `#/compare/${enc(a)}/${enc(b)}` + (tensor ? `/tensor/${enc(tensor)}` : "");

async function fillChoices(route) {
  const listed = new Set([...$("compare-a").options].map((o) => o.value));
  // archives opened since (open.js) are listed again
  if (listed.size && (!route.a || listed.has(route.a)) && (!route.b || listed.has(route.b))) return;
  const listing = await getJSON("/archives");
  const refs = [];
  for (const archive of listing.archives) {
    refs.push(archive.id);
    for (const version of [archive.version, ...(archive.retiring || [])]) if (version) refs.push(`${archive.id}@${version}`);
  }
  for (const id of ["compare-a", "compare-b"]) $(id).replaceChildren(...refs.map((ref) => new Option(ref, ref)));
  if (route.a) $("compare-a").value = route.a;
  if (route.b) $("compare-b").value = route.b;
  else if (refs.length > 1) $("compare-b").selectedIndex = 1;
}

async function show() {
  const route = parse();
  document.body.classList.toggle("comparing", Boolean(route));
  $("compare-pane").hidden = !route;
  if (!route) return;
  await fillChoices(route);
  if (!route.a || !route.b) return;
  const key = `${route.a}\n${route.b}`;
  if (view.key !== key) {
    $("compare-summary").textContent = "comparing…";
    view.body = await getJSON(`/archives/${enc(route.a)}/compare/${enc(route.b)}`);
    view.key = key;
    renderSummary(route);
    renderModules();
    renderTable(route);
  }
  await renderTensor(route);
}

function renderSummary(route) {
  const s = view.body.summary;
  const counts = Object.entries(s.counts).filter(([, n]) => n).map(([status, n]) => `${n} ${status}`).join(", ");
  $("compare-summary").textContent = s.identical
    ? `${route.a} and ${route.b} are identical: ${counts || "no tensors"}`
    : `${route.a} → ${route.b}: ${counts}; ${s.bytes_differ.toLocaleString()} bytes differ` +
      (s.sampled ? `; ${s.sampled} sampled` : "");
}

// A module's bar is its pooled relative change, scaled to the largest shown. A module whose old
// values are all zero has no relative change (from_zero): its bar is its absolute change ‖a−b‖,
// scaled to the largest such one, drawn in another colour and labelled "abs", never a 0-length bar.
function renderModules() {
  const modules = view.body.summary.modules.slice(0, 20);
  const top = Math.max(...modules.map((m) => (m.from_zero ? 0 : m.relative_l2 || 0)), 1e-300);
  const topAbsolute = Math.max(...modules.map((m) => (m.from_zero ? m.absolute_l2 : 0)), 1e-300);
  $("compare-modules").replaceChildren(
    ...modules.map((m) => {
      const row = document.createElement("div");
      row.className = "bar-row";
      row.dataset.testid = "module-bar";
      row.dataset.measure = m.structural ? "structural" : m.from_zero ? "absolute" : "relative";
      const label = document.createElement("span");
      label.textContent = m.module || "(top level)";
      const bar = document.createElement("div");
      const value = document.createElement("span");
      row.title = `${m.changed} changed, ${m.structural} added/removed/retyped of ${m.tensors}`;
      if (m.structural) {
        bar.className = "bar structural";
        bar.style.width = "100%";
        value.textContent = `${m.structural} structural`;
      } else if (m.from_zero) {
        bar.className = "bar absolute";
        bar.style.width = `${(100 * m.absolute_l2) / topAbsolute}%`;
        value.textContent = `abs ${short(m.absolute_l2)}`;
        row.title += `; the old values are all zero, so there is no relative change: the bar is the absolute change ‖a−b‖ = ${short(m.absolute_l2)}, scaled among such modules`;
      } else {
        bar.className = "bar";
        bar.style.width = `${(100 * (m.relative_l2 || 0)) / top}%`;
        value.textContent = short(m.relative_l2 ?? 0);
        row.title += `; relative change ‖a−b‖/‖a‖ = ${short(m.relative_l2 ?? 0)}`;
      }
      row.append(label, bar, value);
      return row;
    }),
  );
}

const COLUMNS = [
  ["status", "status"],
  ["name", "name"],
  ["relative_l2", "rel. L2"],
  ["max_abs_diff", "max |a−b|"],
  ["cosine", "cosine"],
  ["fraction_differ", "differ"],
];

function figure(t, key) {
  if (key === "name" || key === "status") return t[key];
  return t.figures ? t.figures[key] : null;
}

function renderTable(route) {
  const rows = view.body.tensors.filter((t) => t.status !== "same");
  const sign = view.descending ? -1 : 1;
  rows.sort((x, y) => {
    const a = figure(x, view.sort);
    const b = figure(y, view.sort);
    if (a === b) return x.name < y.name ? -1 : 1;
    if (a === null || a === undefined) return 1;
    if (b === null || b === undefined) return -1;
    return (a < b ? -1 : 1) * sign;
  });
  const head = document.createElement("tr");
  for (const [key, label] of COLUMNS) {
    const th = document.createElement("th");
    const button = document.createElement("button");
    button.type = "button";
    button.dataset.testid = `sort-${key}`;
    button.textContent = label + (view.sort === key ? (view.descending ? " ▾" : " ▴") : "");
    th.setAttribute("aria-sort", view.sort === key ? (view.descending ? "descending" : "ascending") : "none");
    button.addEventListener("click", () => {
      view.descending = view.sort === key ? !view.descending : key !== "name";
      view.sort = key;
      renderTable(parse());
      $("compare-table").querySelector(`[data-testid=sort-${key}]`).focus();
    });
    th.append(button);
    head.append(th);
  }
  const body = rows.map((t) => {
    const tr = document.createElement("tr");
    tr.dataset.testid = "compare-row";
    tr.dataset.name = t.name;
    for (const [key] of COLUMNS) {
      const td = document.createElement("td");
      const value = figure(t, key);
      if (key === "name") {
        const a = document.createElement("a");
        a.href = hashFor(route.a, route.b, t.name);
        a.textContent = t.from ? `${t.from} → ${t.name}` : t.name;
        td.append(a);
      } else if (key === "status") {
        td.textContent = value;
      } else {
        td.className = "num";
        td.textContent = value === null || value === undefined ? "–" : key === "fraction_differ" ? `${(100 * value).toFixed(2)}%` : short(value);
      }
      tr.append(td);
    }
    return tr;
  });
  $("compare-table").replaceChildren(head, ...body);
}

async function renderTensor(route) {
  const box = $("compare-tensor");
  if (!route.tensor) {
    box.hidden = true;
    return;
  }
  box.hidden = false;
  box.textContent = `loading ${route.tensor}…`;
  let body;
  try {
    body = await getJSON(`/archives/${enc(route.a)}/compare/${enc(route.b)}/tensors/${enc(route.tensor)}`);
  } catch (err) {
    box.textContent = `${route.tensor}: ${err.message}`;
    return;
  }
  const title = document.createElement("h3");
  title.textContent = `${route.tensor} ${body.dtype} [${body.sizes.join(", ")}]` + (body.sampled ? ` (${body.sampled_rows} sampled rows)` : "");
  const figures = ["a", "b", "difference"].map((side) => {
    const fig = document.createElement("figure");
    const caption = document.createElement("figcaption");
    caption.textContent = side === "difference" ? "a − b" : side === "a" ? route.a : route.b;
    const canvas = document.createElement("canvas");
    canvas.dataset.testid = `heat-${side}`;
    fig.append(caption, canvas);
    return [fig, canvas, body.heatmaps[side]];
  });
  box.replaceChildren(title, ...figures.map(([fig]) => fig));
  for (const [, canvas, map] of figures) if (map) drawHeatmap(canvas, map);
  if (!body.heatmaps.difference) box.append("no heat map: the tensor has no 2-D view, or is sampled in blocks");
}

$("compare-form").addEventListener("submit", (event) => {
  event.preventDefault();
  location.hash = hashFor($("compare-a").value, $("compare-b").value);
});
window.addEventListener("hashchange", () => show().catch((err) => ($("compare-summary").textContent = err.message)));
show().catch((err) => ($("compare-summary").textContent = err.message));
