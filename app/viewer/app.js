// pt2serve viewer: archive summary, a virtualized tensor table, and a tensor detail panel.
// Deep links: #/archive/<id>[/model/<model>]/tensor/<name>  (each part encodeURIComponent'ed).

import { getJSON, urls } from "./api.js";
import { drawHeatmap, drawHistogram, dtypeBars } from "./charts.js";
import { renderPrograms, syncPtdLink } from "./executorch.js";
import { formatBytes, formatCount, matcher, prepare, shapeText, sortRows, summarize, treeItems } from "./model.js";
import { itemKey, VirtualTable } from "./table.js";

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
  for (let i = 0; i + 1 < parts.length; i += 2) {
    const key = parts[i];
    if (key === "tensor") {
      route.tensor = decodeURIComponent(parts.slice(i + 1).join("/"));
      break;
    }
    if (key === "archive" || key === "model") route[key] = decodeURIComponent(parts[i + 1]);
  }
  return route;
}

function hashFor(archive, model, tensor) {
  let hash = `#/archive/${encodeURIComponent(archive)}`;
  if (model && state.models.length > 1) hash += `/model/${encodeURIComponent(model)}`;
  if (tensor) hash += `/tensor/${encodeURIComponent(tensor)}`;
  return hash;
}

function setHash() {
  if (!state.archive) return;
  const hash = hashFor(state.archive, state.model, state.open);
  if (location.hash !== hash) history.replaceState(null, "", hash);
}

async function applyRoute() {
  const route = parseHash();
  const archive = route.archive && state.archives.some((a) => a.id === route.archive) ? route.archive : null;
  if (archive && (archive !== state.archive || (route.model && route.model !== state.model))) {
    await loadArchive(archive, route.model || null);
  }
  if (route.tensor) {
    if (route.tensor !== state.open) openTensor(route.tensor, true);
  } else if (state.open) {
    closeDetail();
  }
}

// ---- loading -------------------------------------------------------------------------------

async function start() {
  try {
    const listing = await getJSON(urls.archives());
    state.archives = listing.archives;
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
    const route = parseHash();
    const first = route.archive && listing.archives.some((a) => a.id === route.archive)
      ? route.archive : listing.default || (listing.archives[0] && listing.archives[0].id);
    if (!first) {
      showError("this service has no archives configured");
      return;
    }
    await loadArchive(first, route.model || null);
    if (route.tensor) openTensor(route.tensor, true);
  } catch (err) {
    showError(`could not list archives: ${err.message}`);
  }
}

async function loadArchive(id, model) {
  const token = {};
  state.loading = token;
  closeDetail(false);
  showError("");
  $("archive").value = id;
  const info = state.archives.find((a) => a.id === id) || {};
  $("location").textContent = info.location || "";
  renderPrograms(info);
  try {
    const models = info.models || [];
    const chosen = model || (models.length === 1 ? models[0] : models.includes("model") ? "model" : models[0]);
    const listing = await getJSON(urls.tensors(id, chosen));
    if (state.loading !== token) return;
    state.archive = id;
    state.version = listing.version; // download links name it: immutable, cacheable URLs
    state.models = listing.models;
    state.model = chosen || listing.models[0] || null;
    $("model").replaceChildren(...listing.models.map((m) => new Option(m, m)));
    $("model").value = state.model;
    $("model").disabled = listing.models.length < 2;
    state.rows = prepare(listing.tensors);
    state.byName = new Map(state.rows.map((row) => [row.name, row]));
    state.collapsed = new Set();
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
    showError(`could not load archive ${id}: ${err.message}`);
  }
}

function renderSummary(tensors) {
  const s = summarize(tensors);
  $("s-tensors").textContent = formatCount(s.count);
  $("s-params").textContent = formatCount(s.params);
  $("s-bytes").textContent = formatBytes(s.bytes);
  $("s-bytes").title = `${s.bytes} bytes`;
  $("s-kinds").textContent = [s.kinds.weight, s.kinds.constant, s.kinds.custom_object].map(formatCount).join(" / ");
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
    showError(`no tensor ${JSON.stringify(name)} in archive ${state.archive}${state.model ? ` (model ${state.model})` : ""}`);
    return;
  }
  showError("");
  state.open = name;
  const t = row.t;
  $("detail").hidden = false;
  document.body.classList.add("detail-open");
  $("d-name").textContent = t.name;
  $("d-dtype").textContent = t.dtype || "—";
  $("d-shape").textContent = shapeText(t);
  $("d-kind").textContent = `${t.kind}${t.is_param ? " (parameter)" : ""}${t.pickled ? " · pickled" : ""}`;
  $("d-bytes").textContent = t.nbytes === null ? "—" : `${formatBytes(t.nbytes)} (${formatCount(t.numel)} × ${t.itemsize} B)`;
  $("d-strides").textContent = t.strides ? `[${t.strides.join(", ")}] offset ${t.storage_offset}${t.dense ? "" : " · not dense"}` : "—";
  $("d-dimorder").textContent = t.dim_order ? `[${t.dim_order.join(", ")}]` : "—";
  const s = t.storage || {};
  $("d-storage").textContent =
    `${s.entry} · offset ${s.offset ?? "—"} · payload ${formatBytes(s.nbytes)} · ${s.compression} · crc32 ${(s.crc32 >>> 0).toString(16).padStart(8, "0")}`;
  const shared = $("d-shared");
  shared.replaceChildren();
  if (!row.sharedWith.length) shared.textContent = "—";
  row.sharedWith.forEach((other, i) => {
    const a = document.createElement("a");
    a.textContent = other;
    a.href = hashFor(state.archive, state.model, other);
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
  const dataUrl = new URL(urls.data(pinnedArchive(), t.name, state.model), location.href).href;
  document.querySelector(".curl").hidden = !readable;
  $("d-curl").textContent = `curl -H 'Range: bytes=0-1023' '${dataUrl}' -o ${safeFile(t.name)}.part`;
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
  try {
    const stats = await getJSON(urls.stats(state.archive, t.name, state.model), { signal: abort.signal });
    if (abort.signal.aborted || state.open !== t.name) return;
    renderStats(stats);
  } catch (err) {
    if (err.name === "AbortError") return;
    box.replaceChildren();
    errorBox.textContent = `no preview: ${err.message}`;
    errorBox.hidden = false;
  }
}

function fmt(x) {
  if (x === null || x === undefined) return "—";
  if (typeof x === "boolean") return String(x);
  if (Array.isArray(x)) return `${fmt(x[0])}${x[1] < 0 ? "−" : "+"}${fmt(Math.abs(x[1]))}j`;
  if (Number.isInteger(x)) return String(x);
  return Number(x.toPrecision(6)).toString();
}

function renderStats(stats) {
  const box = $("d-stats");
  box.replaceChildren();
  $("d-sampled").textContent = stats.sampled
    ? `(from a sample of ${formatCount(stats.sample_elements)} of ${formatCount(stats.numel)} values)`
    : `(all ${formatCount(stats.numel)} values${stats.of === "magnitude" ? ", by magnitude" : ""})`;
  const first = document.createElement("div");
  first.className = "first mono";
  first.dataset.testid = "detail-first";
  first.textContent = `first: ${stats.first.map(fmt).join(", ")}${stats.numel > stats.first.length ? ", …" : ""}`;
  const grid = document.createElement("dl");
  grid.className = "stat-grid";
  const pairs = [
    ["min", stats.min], ["max", stats.max], ["mean", stats.mean], ["std", stats.std],
    ["NaN", stats.nan_count], ["Inf", stats.inf_count], ["zeros", stats.zero_count], ["of", stats.of],
  ];
  for (const [label, value] of pairs) {
    const dt = document.createElement("dt");
    dt.textContent = label;
    const dd = document.createElement("dd");
    dd.dataset.testid = `stat-${label.toLowerCase()}`;
    dd.textContent = typeof value === "string" ? value : fmt(value);
    grid.append(dt, dd);
  }
  box.append(first, grid);
  if (stats.histogram && stats.histogram.counts.length) {
    $("d-hist").hidden = false;
    drawHistogram($("d-hist"), stats.histogram);
  }
  if (stats.heatmap) {
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

// ---- events --------------------------------------------------------------------------------

$("archive").addEventListener("change", (event) => {
  loadArchive(event.target.value, null);
});
$("model").addEventListener("change", (event) => {
  loadArchive(state.archive, event.target.value);
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
  applyRoute();
});
table.onCursor = () => updateSelectionLink();

document.addEventListener("keydown", (event) => {
  const inSearch = event.target === $("search");
  const typing = !inSearch && /^(INPUT|SELECT|TEXTAREA)$/.test(event.target.tagName);
  if (typing || event.ctrlKey || event.metaKey || event.altKey) return;
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
    else if (inSearch) $("search").blur();
  }
});

start();
