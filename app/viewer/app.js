// pt2serve viewer: archive summary, a virtualized tensor table, the program graph, a tensor detail panel.
// Deep links: #/archive/<id>[/model/<model>][/graph][/tensor/<name> | /node/<name>]
// (each part encodeURIComponent'ed; /graph and /node open the graph tab); #/open/... (open.js).

import { ApiError, auth, getJSON, signedUrl, urls } from "./api.js";
import { drawHeatmap, drawHistogram, dtypeBars } from "./charts.js";
import { heatmapSlice, slicedHeatmap } from "./heatslice.js";
import { renderPrograms, syncPtdLink } from "./executorch.js";
import { buildGraphModel, opLabel, searchGraph, shapeLabel } from "./graph-model.js";
import { GraphView } from "./graph-view.js";
import {
  dimOrderText, formatBytes, formatCount, matcher, prepare, shapeText, sortRows, summarize, treeItems,
} from "./model.js";
import { itemKey, VirtualTable } from "./table.js";
import { openAll, openRoute, setupOpenBox, shownHash, showShareLink } from "./open.js";

const $ = (id) => document.getElementById(id);
const MAX_URL = 8000; // keep selection download links well under server request-line limits

const state = {
  archives: [],
  archive: null,
  model: null,
  models: [],
  rows: [],
  byName: new Map(),
  visibleRows: [],
  query: "",
  sortKey: "index",
  descending: false,
  grouped: false,
  collapsed: new Set(),
  open: null, // name of the tensor in the detail panel
  statsAbort: null,
  loading: null,
  tab: "tensors",
  graph: null, // {key, model, data} of the loaded program graph
  graphLoading: null,
  node: null, // name of the node in the node panel
};

const table = new VirtualTable({
  scroller: $("scroller"),
  spacer: $("spacer"),
  rows: $("rows"),
  rowHeight: 28,
  onActivate: activate,
  onCursor: null,
});

function showError(message) {
  const box = $("error");
  box.textContent = message || "";
  box.hidden = !message;
}

// ---- routing -------------------------------------------------------------------------------

function parseHash() {
  const parts = location.hash.replace(/^#\/?/, "").split("/");
  const route = {};
  for (let i = 0; i < parts.length; i++) {
    const key = parts[i];
    if (key === "tensor" || key === "node") {
      route[key] = decodeURIComponent(parts.slice(i + 1).join("/"));
      if (key === "node") route.graph = true;
      break;
    }
    if (key === "graph") route.graph = true;
    else if ((key === "archive" || key === "model") && i + 1 < parts.length) {
      route[key] = decodeURIComponent(parts[i + 1]);
      i += 1;
    }
  }
  return route;
}

function hashFor(archive, model, { tensor = null, node = null, graph = state.tab === "graph" } = {}) {
  let hash = `#/archive/${encodeURIComponent(archive)}`;
  if (model && state.models.length > 1) hash += `/model/${encodeURIComponent(model)}`;
  if (node) return `${hash}/node/${encodeURIComponent(node)}`;
  if (graph) hash += "/graph";
  if (tensor) hash += `/tensor/${encodeURIComponent(tensor)}`;
  return hash;
}

function setHash() {
  if (!state.archive || comparing()) return;
  const hash = hashFor(state.archive, state.model, { tensor: state.open, node: state.open ? null : state.node });
  if (location.hash !== hash) history.replaceState(null, "", hash);
}

// #/compare/... belongs to compare.js: this view leaves the hash and its panes alone there
const comparing = () => location.hash.startsWith("#/compare/");

async function applyRoute(route = parseHash()) {
  if (comparing()) return;
  const archive = route.archive && state.archives.some((a) => a.id === route.archive) ? route.archive : null;
  if (archive && (archive !== state.archive || (route.model && route.model !== state.model))) {
    await loadArchive(archive, route.model || null);
  }
  await showTab(route.graph ? "graph" : "tensors", false);
  if (route.node) await revealNode(route.node);
  if (route.tensor) {
    if (route.tensor !== state.open) openTensor(route.tensor, true);
  } else if (state.open) {
    closeDetail();
  }
}

// ---- loading -------------------------------------------------------------------------------

/** GET /archives into the archive selector (and the Open box); the listing. */
async function listArchives() {
  const listing = await getJSON(urls.archives());
  $("token-form").hidden = true;
  state.archives = listing.archives;
  setupOpenBox(listing.allow_open || [], showOpened);
  const select = $("archive");
  select.replaceChildren(
    ...listing.archives.map((a) => {
      const option = new Option(
        a.status === "open" ? `${a.id} (${formatCount(a.tensors)} tensors)` : `${a.id} — ${a.status}`,
        a.id,
      );
      option.disabled = a.status === "error";
      return option;
    }),
  );
  if (state.archive) select.value = state.archive;
  return listing;
}

/** Locations just opened: list them, then show the archive (or the compare view of two). */
async function showOpened(ids) {
  await listArchives();
  location.hash = shownHash(ids);
}

/** An #/open/... link: open its locations, then show them in its place in the history. */
async function followOpenLink(locations) {
  const ids = await openAll(locations);
  if (!ids) return false;
  await listArchives();
  history.replaceState(null, "", shownHash(ids));
  if (ids.length === 2) window.dispatchEvent(new HashChangeEvent("hashchange")); // compare.js's view
  return true;
}

async function start() {
  try {
    let listing = await listArchives();
    const opening = openRoute();
    if (opening && (await followOpenLink(opening))) listing = { ...listing, archives: state.archives };
    const route = parseHash();
    const first = route.archive && listing.archives.some((a) => a.id === route.archive)
      ? route.archive : listing.default || (listing.archives[0] && listing.archives[0].id);
    if (!first) {
      showError("This service has no archives configured.");
      return;
    }
    await loadArchive(first, route.model || null);
    await applyRoute(route); // loadArchive rewrote the hash: use the one the page was opened with
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) {
      askForToken(auth.token ? "That token was refused; try again." : "");
      return;
    }
    showError(`Could not list the archives: ${err.message}`);
  }
}

function askForToken(message) {
  auth.token = null;
  $("token-form").hidden = false;
  $("token-error").textContent = message;
  $("token-input").focus();
}

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  auth.token = $("token-input").value.trim();
  $("token-input").value = "";
  start();
});

async function loadArchive(id, model) {
  const token = {};
  state.loading = token;
  closeDetail(false);
  showError("");
  $("archive").value = id;
  const info = state.archives.find((a) => a.id === id) || {};
  $("location").textContent = info.location || "";
  $("location").title = info.location || ""; // the whole of it where the header cuts it short
  $("version").textContent = "";
  showShareLink(info);
  renderPrograms(info);
  try {
    const models = info.models || [];
    const chosen = model || (models.length === 1 ? models[0] : models.includes("model") ? "model" : models[0]);
    const listing = await getJSON(urls.tensors(id, chosen));
    if (state.loading !== token) return;
    state.archive = id;
    state.version = listing.version; // download links name it: immutable, cacheable URLs
    $("version").textContent = listing.version ? `@${listing.version}` : "";
    $("version").title = "the archive version shown (versioned URLs name it)";
    state.models = listing.models;
    state.model = chosen || listing.models[0] || null;
    $("model").replaceChildren(...listing.models.map((m) => new Option(m, m)));
    $("model").value = state.model;
    $("model").disabled = listing.models.length < 2;
    state.rows = prepare(listing.tensors);
    state.byName = new Map(state.rows.map((row) => [row.name, row]));
    state.collapsed = new Set();
    state.node = null;
    if (state.graph && state.graph.key !== `${id}\u0000${state.model}`) {
      state.graph = null; // another program: never show the previous one's graph or counts
      graphView.clear();
      $("graph-count").textContent = "";
      $("node-detail").hidden = true;
    }
    renderSummary(listing.tensors);
    refresh(null);
    setHash();
  } catch (err) {
    if (state.loading !== token) return;
    state.archive = id;
    state.version = null;
    state.rows = [];
    state.byName = new Map();
    renderSummary([]);
    refresh(null);
    showError(`Could not load archive "${id}": ${err.message}`);
  }
}

function renderSummary(tensors) {
  const s = summarize(tensors);
  $("s-tensors").textContent = formatCount(s.count);
  $("s-aliases").textContent = s.aliases === 1 ? "1 is another's alias (tied)"
    : s.aliases ? `${formatCount(s.aliases)} are aliases of others (tied)` : "";
  $("s-params").textContent = formatCount(s.params);
  $("s-params").title = "elements of the weights, each stored tensor counted once";
  $("s-bytes").textContent = formatBytes(s.bytes);
  $("s-bytes").title = `${formatCount(s.bytes)} bytes in unique payloads`;
  $("s-kinds").textContent = [s.kinds.weight, s.kinds.constant, s.kinds.custom_object].map(formatCount).join(" · ");
  $("s-shared").textContent = formatCount(s.shared);
  dtypeBars($("dtype-chart"), s.dtypes);
}

// ---- table ---------------------------------------------------------------------------------

function refresh(keepKey = itemKey(table.cursorItem())) {
  const match = matcher(state.query);
  let rows = match ? state.rows.filter(match) : state.rows;
  if (state.sortKey !== "index") rows = sortRows(rows, state.sortKey, state.descending);
  else if (state.descending) rows = rows.slice().reverse();
  state.visibleRows = rows;
  const items = state.grouped ? treeItems(rows, state.collapsed) : rows.map((row) => ({ row, depth: 0 }));
  table.setItems(items, keepKey);
  const count = $("match-count");
  count.textContent = match ? `${formatCount(rows.length)} of ${formatCount(state.rows.length)} match` : "";
  updateSelectionLink();
  for (const button of $("table-head").querySelectorAll("button")) {
    button.classList.toggle("sorted", button.dataset.key === state.sortKey);
    button.classList.toggle("desc", button.dataset.key === state.sortKey && state.descending);
  }
}

// `{id}@{version}`: the URL form whose bytes never change (see docs/edge-delivery.md)
function pinnedArchive() {
  return state.version ? `${state.archive}@${state.version}` : state.archive;
}

function updateSelectionLink() {
  const link = $("download-selection");
  const cursor = table.cursorItem();
  let href;
  let label;
  if (state.grouped && cursor && cursor.group) {
    href = urls.safetensors(pinnedArchive(), state.model, { prefix: cursor.prefix });
    label = `safetensors of ${cursor.prefix}*`;
  } else if (state.query.trim()) {
    href = urls.safetensors(pinnedArchive(), state.model, { names: state.visibleRows.map((r) => r.name) });
    label = `safetensors of ${formatCount(state.visibleRows.length)} matching`;
  } else {
    href = urls.safetensors(pinnedArchive(), state.model);
    label = "safetensors of all";
  }
  const usable = state.archive && state.visibleRows.length > 0 && href.length <= MAX_URL;
  link.classList.toggle("disabled", !usable);
  link.href = usable ? href : "#";
  link.textContent = usable || !state.visibleRows.length ? label : `${label} (too many names: narrow the search)`;
  syncPtdLink();
}

function activate(item) {
  if (!item) return;
  if (item.group) {
    if (state.collapsed.has(item.prefix)) state.collapsed.delete(item.prefix);
    else state.collapsed.add(item.prefix);
    refresh(itemKey(item));
    return;
  }
  openTensor(item.row.name);
}

// ---- detail --------------------------------------------------------------------------------

function openTensor(name, fromRoute = false) {
  const row = state.byName.get(name);
  if (!row) {
    showError(`Archive "${state.archive}"${state.model ? `, model "${state.model}",` : ""} has no tensor "${name}".`);
    return;
  }
  showError("");
  state.open = name;
  const t = row.t;
  $("detail").hidden = false;
  document.body.classList.add("detail-open");
  setBreakable($("d-name"), t.name);
  $("d-dtype").textContent = t.dtype || "—";
  $("d-shape").textContent = shapeText(t);
  $("d-kind").textContent = `${t.kind}${t.is_param ? " (parameter)" : ""}${t.pickled ? " · pickled" : ""}`;
  $("d-bytes").textContent = t.nbytes === null ? "—" : `${formatBytes(t.nbytes)} (${formatCount(t.numel)} × ${t.itemsize} B)`;
  $("d-strides").textContent = t.strides ? `[${t.strides.join(", ")}] offset ${t.storage_offset}${t.dense ? "" : " · not dense"}` : "—";
  $("d-dimorder").textContent = dimOrderText(t);
  const s = t.storage || {};
  $("d-storage").replaceChildren(...[
    s.entry, `offset ${s.offset ?? "—"}`, `payload ${formatBytes(s.nbytes)}`, s.compression,
    `crc32 ${(s.crc32 >>> 0).toString(16).padStart(8, "0")}`,
  ].flatMap((part, i) => (i ? [sep(), nowrap(part)] : [nowrap(part)])));
  const shared = $("d-shared");
  shared.replaceChildren();
  if (!row.sharedWith.length) shared.textContent = "—";
  row.sharedWith.forEach((other, i) => {
    const a = document.createElement("a");
    a.textContent = other;
    a.href = hashFor(state.archive, state.model, { tensor: other });
    if (i) shared.append(", ");
    shared.append(a);
  });
  $("d-json").textContent = JSON.stringify(t, null, 2);
  const readable = !t.unsupported;
  for (const [id, format] of [["d-raw", "raw"], ["d-npy", "npy"]]) {
    const link = $(id);
    link.href = readable ? urls.data(pinnedArchive(), t.name, state.model, format) : "#";
    link.classList.toggle("disabled", !readable);
    link.setAttribute("download", `${t.name}${format === "npy" ? ".npy" : ".bin"}`);
  }
  document.querySelector(".curl").hidden = !readable;
  showCurl(t);
  loadConsumers(t);
  if (!fromRoute) {
    const index = table.items.findIndex((item) => !item.group && item.row.name === name);
    if (index >= 0 && index !== table.cursor) table.setCursor(index);
  } else {
    const index = table.items.findIndex((item) => !item.group && item.row.name === name);
    if (index >= 0) table.setCursor(index);
  }
  setHash();
  loadStats(t);
}

function nowrap(text) {
  const span = document.createElement("span");
  span.style.whiteSpace = "nowrap";
  span.textContent = text;
  return span;
}

function sep() {
  const span = document.createElement("span");
  span.className = "sep";
  span.textContent = " · ";
  return span;
}

/** A dotted name that may wrap after its dots, never inside a word. */
function setBreakable(element, name) {
  element.replaceChildren();
  name.split(/(?<=[./])/).forEach((part, i) => {
    if (i) element.append(document.createElement("wbr"));
    element.append(part);
  });
  element.title = name;
}

async function showCurl(t) {
  const path = urls.data(pinnedArchive(), t.name, state.model);
  const name = t.name;
  let url = path;
  try {
    url = await signedUrl(path);
  } catch {
    url = path;
  }
  if (state.open !== name) return;
  const full = new URL(url, location.href).href;
  $("d-curl").textContent = `curl -H 'Range: bytes=0-1023' ${shellQuote(full)} -o ${safeFile(name)}.part`;
}

/** One shell word holding `text` exactly: single quotes, each ' inside written '\'' */
function shellQuote(text) {
  return `'${text.replaceAll("'", "'\\''")}'`;
}

async function loadConsumers(t) {
  const box = $("d-consumers");
  box.textContent = "…";
  const name = t.name;
  try {
    const found = await getJSON(urls.consumers(state.archive, name, state.model));
    if (state.open !== name) return;
    box.replaceChildren();
    if (!found.consumers.length) {
      box.textContent = found.placeholder ? "no node reads it" : "not an input of the program";
      return;
    }
    const list = document.createElement("ul");
    list.dataset.testid = "consumer-list";
    for (const c of found.consumers) {
      const li = document.createElement("li");
      const a = document.createElement("a");
      a.dataset.testid = "consumer-link";
      a.dataset.node = c.node;
      a.href = hashFor(state.archive, state.model, { node: c.node });
      a.textContent = c.node;
      li.append(a, ` ${c.target.replace(/^aten\./, "")}`);
      if (c.via !== name) li.append(` (via ${c.via})`);
      list.append(li);
    }
    box.append(list);
  } catch (err) {
    if (state.open === name) box.textContent = `— (${err.message})`;
  }
}

function safeFile(name) {
  return name.replace(/[^A-Za-z0-9._-]/g, "_");
}

async function loadStats(t) {
  if (state.statsAbort) state.statsAbort.abort();
  const abort = new AbortController();
  state.statsAbort = abort;
  const errorBox = $("d-stats-error");
  const box = $("d-stats");
  const hist = $("d-hist");
  const heat = $("d-heat");
  errorBox.hidden = true;
  hist.hidden = true;
  heat.hidden = true;
  $("d-sampled").textContent = "";
  if (t.unsupported) {
    box.replaceChildren();
    errorBox.textContent = `no preview: ${t.unsupported}`;
    errorBox.hidden = false;
    return;
  }
  box.textContent = "loading…";
  // a large tensor's heat map: only the rows it draws, fetched beside the statistics
  const slice = heatmapSlice(t);
  const heatmap = slice === null ? null : slicedHeatmap(state.archive, state.model, t, slice, { signal: abort.signal });
  heatmap?.catch(() => {}); // awaited below; a failure then falls back to the statistics' map
  try {
    const stats = await getJSON(urls.stats(state.archive, t.name, state.model), { signal: abort.signal });
    if (abort.signal.aborted || state.open !== t.name) return;
    renderStats(stats, heatmap !== null);
    if (heatmap !== null) await drawSlicedHeatmap(heatmap, stats, abort, t);
  } catch (err) {
    if (err.name === "AbortError") return;
    box.replaceChildren();
    errorBox.textContent = `no preview: ${err.message}`;
    errorBox.hidden = false;
  }
}

/** Numbers as float32 shows them: 8 significant digits (0.99999976 stays 0.99999976, not 1). */
function fmt(x) {
  if (x === null || x === undefined) return "—";
  if (typeof x === "boolean") return String(x);
  if (Array.isArray(x)) return `${fmt(x[0])}${x[1] < 0 ? "−" : "+"}${fmt(Math.abs(x[1]))}j`;
  if (Number.isInteger(x)) return String(x);
  const a = Math.abs(x);
  if (a < 1e-3 || a >= 1e9) return x.toExponential(7).replace(/\.?0+e/, "e"); // 3.7152502e-5, not 0.0000371525…
  return Number(x.toPrecision(8)).toString();
}

/** Draw the heat map of the rows a slice brought (marked with that slice), or the statistics' own
 * map if the slice failed. */
async function drawSlicedHeatmap(pending, stats, abort, t) {
  const heat = $("d-heat");
  let map;
  try {
    map = await pending;
  } catch (err) {
    if (err.name === "AbortError") return;
    map = null;
  }
  if (abort.signal.aborted || state.open !== t.name) return;
  if (map === null) {
    if (stats.heatmap) {
      heat.hidden = false;
      drawHeatmap(heat, stats.heatmap);
    }
    return;
  }
  heat.hidden = false;
  heat.dataset.slice = map.slice;
  drawHeatmap(heat, map);
  heat.title += ` (rows and columns sampled: slice ${map.slice})`;
}

function renderStats(stats, slicedMap = false) {
  const box = $("d-stats");
  box.replaceChildren();
  const magnitude = stats.of === "magnitude" ? "; complex values are measured by magnitude" : "";
  $("d-sampled").textContent = stats.sampled
    ? `(a sample of ${formatCount(stats.sample_elements)} of ${formatCount(stats.numel)} values${magnitude})`
    : `(all ${formatCount(stats.numel)} values${magnitude})`;
  const first = document.createElement("div");
  first.className = "first mono";
  first.dataset.testid = "detail-first";
  first.textContent = `first: ${stats.first.map(fmt).join(", ")}${stats.numel > stats.first.length ? ", …" : ""}`;
  const grid = document.createElement("dl");
  grid.className = "stat-grid";
  const pairs = [
    ["min", "min", stats.min], ["max", "max", stats.max], ["mean", "mean", stats.mean],
    ["std", "std (population)", stats.std], ["nan", "NaN count", stats.nan_count],
    ["inf", "±Inf count", stats.inf_count], ["zeros", "zeros", stats.zero_count],
  ];
  for (const [key, label, value] of pairs) {
    const cell = document.createElement("div");
    const dt = document.createElement("dt");
    dt.textContent = label;
    const dd = document.createElement("dd");
    dd.dataset.testid = `stat-${key}`;
    dd.textContent = fmt(value);
    dd.title = value === null || value === undefined ? "" : String(value);
    cell.append(dt, dd);
    grid.append(cell);
  }
  box.append(first, grid);
  if (stats.histogram && stats.histogram.counts.length) {
    $("d-hist").hidden = false;
    drawHistogram($("d-hist"), stats.histogram);
  }
  delete $("d-heat").dataset.slice;
  if (stats.heatmap && !slicedMap) {
    $("d-heat").hidden = false;
    drawHeatmap($("d-heat"), stats.heatmap);
  }
}

function closeDetail(updateHash = true) {
  if (state.statsAbort) state.statsAbort.abort();
  state.open = null;
  $("detail").hidden = true;
  document.body.classList.remove("detail-open");
  if (updateHash) setHash();
}

// ---- graph ---------------------------------------------------------------------------------

const graphView = new GraphView({
  svg: $("graph-svg"),
  onWeight: (node) => {
    state.node = node.name;
    openTensor(node.tensor);
  },
  onNode: (node) => showNode(node.name),
  onChange: (stats) => {
    window.__pt2GraphRender = stats;
  },
});

async function showTab(tab, updateHash = true) {
  state.tab = tab;
  $("tab-tensors").classList.toggle("active", tab === "tensors");
  $("tab-graph").classList.toggle("active", tab === "graph");
  $("tab-tensors").setAttribute("aria-selected", String(tab === "tensors"));
  $("tab-graph").setAttribute("aria-selected", String(tab === "graph"));
  $("tensors-pane").hidden = tab !== "tensors";
  $("graph-pane").hidden = tab !== "graph";
  if (tab === "tensors") {
    state.node = null;
    table.schedule();
  }
  if (updateHash) setHash();
  if (tab === "graph") await loadGraph();
}

async function loadGraph() {
  const key = `${state.archive}\u0000${state.model}`;
  if (state.graph && state.graph.key === key) return state.graph;
  if (state.graphLoading && state.graphLoading.key === key) return state.graphLoading.promise;
  const started = performance.now();
  $("graph-count").textContent = "loading the program…";
  $("node-detail").hidden = true;
  const promise = (async () => {
    try {
      const data = await getJSON(urls.graph(state.archive, state.model));
      const fetched = performance.now();
      const model = buildGraphModel(data);
      const built = performance.now();
      if (`${state.archive}\u0000${state.model}` !== key) return null;
      graphView.setModel(model);
      graphView.render();
      graphView.fit();
      state.graph = { key, model, data };
      const groups = model.groups.size - 1;
      $("graph-count").textContent =
        `${formatCount(data.nodes.length)} nodes · ${formatCount(model.edgeCount)} edges · ${formatCount(groups)} modules`;
      window.__pt2GraphTiming = {
        nodes: data.nodes.length, fetchMs: fetched - started, buildMs: built - fetched,
        renderMs: performance.now() - built, totalMs: performance.now() - started,
      };
      return state.graph;
    } catch (err) {
      $("graph-count").textContent = "";
      showError(`Could not read the program graph: ${err.message}`);
      return null;
    } finally {
      if (state.graphLoading && state.graphLoading.key === key) state.graphLoading = null;
    }
  })();
  state.graphLoading = { key, promise };
  return promise;
}

async function revealNode(name) {
  const loaded = await loadGraph();
  if (!loaded) return;
  if (!loaded.model.byName.has(name)) {
    showError(`The program has no node "${name}".`);
    return;
  }
  graphView.reveal(name);
  showNode(name, false);
}

function link(text, href, testid) {
  const a = document.createElement("a");
  a.textContent = text;
  a.href = href;
  if (testid) a.dataset.testid = testid;
  return a;
}

function showNode(name, updateHash = true) {
  const model = state.graph && state.graph.model;
  const node = model && model.byName.get(name);
  if (!node) return;
  state.node = name;
  $("node-detail").hidden = false;
  setBreakable($("n-name"), node.name);
  const facts = $("n-facts");
  facts.replaceChildren();
  const row = (label, ...content) => {
    const dt = document.createElement("dt");
    dt.textContent = label;
    const dd = document.createElement("dd");
    dd.append(...content);
    facts.append(dt, dd);
    return dd;
  };
  row("op", node.op === "call_function" ? node.target : node.op === "placeholder" ? `placeholder (${node.target})` : "output");
  if (node.group) row("module", `${node.group} `, model.groups.get(node.group).type.split(".").pop());
  if (node.tensor) {
    row("tensor", link(node.tensor, hashFor(state.archive, state.model, { tensor: node.tensor, graph: true }), "node-tensor-link"));
  }
  for (const arg of node.inputs || []) {
    if (arg.tensors) {
      const parts = arg.tensors.flatMap((value, i) => {
        const from = model.producer.get(value);
        const target = from && from.tensor
          ? link(from.tensor, hashFor(state.archive, state.model, { tensor: from.tensor, graph: true }), "node-input-tensor")
          : from ? link(value, hashFor(state.archive, state.model, { node: from.name }), "node-input") : value;
        return i ? [", ", target] : [target];
      });
      row(arg.name, ...(parts.length ? parts : ["[]"]));
    } else {
      row(arg.name, JSON.stringify(arg.value));
    }
  }
  for (const out of node.outputs || []) row("→ " + out.name, shapeLabel(out) || "—");
  const readers = model.readers.get(node.name) || [];
  if (readers.length) {
    row("read by", ...readers.flatMap((r, i) => {
      const a = link(r.name, hashFor(state.archive, state.model, { node: r.name }), "node-reader");
      return i ? [", ", a] : [a];
    }));
  }
  if (updateHash) {
    state.open = null;
    closeDetail(false);
    setHash();
  }
}

function showResults(hits) {
  const list = $("graph-results");
  list.replaceChildren(...hits.map((node, i) => {
    const li = document.createElement("li");
    li.dataset.testid = "graph-result";
    li.dataset.name = node.name;
    if (i === 0) li.classList.add("active");
    li.textContent = `${node.name} — ${node.tensor || opLabel(node)}${node.group ? `  (${node.group})` : ""}`;
    return li;
  }));
  list.hidden = !hits.length;
}

function goToResult(name) {
  $("graph-results").hidden = true;
  graphView.reveal(name);
  showNode(name);
}

$("graph-search").addEventListener("input", (event) => {
  if (!state.graph) return;
  showResults(searchGraph(state.graph.model, event.target.value));
});
$("graph-search").addEventListener("keydown", (event) => {
  if (event.key === "Enter") {
    const first = $("graph-results").querySelector("li");
    if (first) goToResult(first.dataset.name);
  } else if (event.key === "Escape") {
    $("graph-results").hidden = true;
  }
});
$("graph-results").addEventListener("click", (event) => {
  const li = event.target.closest("li");
  if (li) goToResult(li.dataset.name);
});
$("graph-fit").addEventListener("click", () => graphView.fit());
$("graph-collapse").addEventListener("click", () => graphView.collapseAll());
$("n-close").addEventListener("click", () => {
  $("node-detail").hidden = true;
  state.node = null;
  setHash();
});
$("tab-tensors").addEventListener("click", () => showTab("tensors"));
$("tab-graph").addEventListener("click", () => showTab("graph"));

// Downloads behind a token: the browser cannot add Authorization to a plain link, so the link is
// exchanged for a short-lived signed one at click time.
document.addEventListener("click", async (event) => {
  const a = event.target.closest("a.button");
  if (!a || !auth.required || a.classList.contains("disabled")) return;
  const href = a.getAttribute("href");
  if (!href || href === "#" || !href.startsWith("/")) return;
  event.preventDefault();
  try {
    const signed = await signedUrl(href);
    const go = document.createElement("a");
    go.href = signed;
    if (a.hasAttribute("download")) go.setAttribute("download", a.getAttribute("download") || "");
    document.body.append(go);
    go.click();
    go.remove();
  } catch (err) {
    showError(`Could not sign the download link: ${err.message}`);
  }
});

// ---- events --------------------------------------------------------------------------------

$("archive").addEventListener("change", async (event) => {
  await loadArchive(event.target.value, null);
  if (state.tab === "graph") loadGraph();
});
$("model").addEventListener("change", async (event) => {
  await loadArchive(state.archive, event.target.value);
  if (state.tab === "graph") loadGraph();
});
$("search").addEventListener("input", (event) => {
  state.query = event.target.value;
  refresh(null);
});
$("group").addEventListener("change", (event) => {
  state.grouped = event.target.checked;
  refresh();
});
$("table-head").addEventListener("click", (event) => {
  const button = event.target.closest("button");
  if (!button) return;
  const key = button.dataset.key;
  if (state.sortKey === key) {
    if (state.descending) {
      state.sortKey = "index"; // third click: archive order again
      state.descending = false;
    } else state.descending = true;
  } else {
    state.sortKey = key;
    state.descending = false;
  }
  refresh();
});
$("d-close").addEventListener("click", () => closeDetail());
$("d-copy").addEventListener("click", async () => {
  const text = $("d-curl").textContent;
  try {
    await navigator.clipboard.writeText(text);
    $("d-copy").textContent = "copied";
  } catch {
    const range = document.createRange();
    range.selectNodeContents($("d-curl"));
    getSelection().removeAllRanges();
    getSelection().addRange(range);
    $("d-copy").textContent = "selected: press Ctrl+C";
  }
  setTimeout(() => { $("d-copy").textContent = "copy"; }, 1500);
});
window.addEventListener("hashchange", () => {
  const opening = openRoute();
  if (opening) followOpenLink(opening).then((shown) => shown && applyRoute());
  else applyRoute();
});
table.onCursor = () => updateSelectionLink();

document.addEventListener("keydown", (event) => {
  const inSearch = event.target === $("search");
  const typing = !inSearch && /^(INPUT|SELECT|TEXTAREA)$/.test(event.target.tagName);
  if (typing || event.ctrlKey || event.metaKey || event.altKey) return;
  if (state.tab === "graph" && event.key !== "Escape") return;
  if (event.key === "/" && !inSearch) {
    event.preventDefault();
    $("search").focus();
    $("search").select();
  } else if (event.key === "ArrowDown" || event.key === "ArrowUp") {
    event.preventDefault();
    const step = event.key === "ArrowDown" ? 1 : -1;
    table.setCursor(table.cursor < 0 ? 0 : table.cursor + step);
    const item = table.cursorItem();
    if (state.open && item && !item.group) openTensor(item.row.name);
  } else if (event.key === "Enter") {
    const item = table.cursorItem() || (table.items.length === 1 ? table.items[0] : null);
    if (item) {
      event.preventDefault();
      activate(item);
    }
  } else if (event.key === "Escape") {
    if (state.open) closeDetail();
    else if (state.tab === "graph" && !$("node-detail").hidden) $("n-close").click();
    else if (inSearch) $("search").blur();
  }
});

start();
