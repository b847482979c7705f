// The graph tab's drawing: each expanded module group is laid out top to bottom by dagre on its
// own (children: nodes, and sub-groups as boxes), bottom-up, and cached until something inside it
// changes; so expanding one group re-lays out that group and its ancestors only. SVG, pan and zoom.

import { graphlib, layout as dagreLayout } from "./vendor/dagre.esm.js";
import { opLabel, shapeLabel } from "./graph-model.js";

const SVG = "http://www.w3.org/2000/svg";
const CHAR_W = 6.7; // 11px monospace
const NODE_H = 34;
const GROUP_HEAD = 24;
const PAD = 12;

function textWidth(text) {
  return Math.min(320, Math.max(60, text.length * CHAR_W + 18));
}

function el(name, attrs, parent) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.append(e);
  return e;
}

function clip(text, width) {
  const max = Math.max(4, Math.floor((width - 14) / CHAR_W));
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

function groupLabel(group) {
  const last = group.path.split(".").pop();
  const type = group.type ? group.type.split(".").pop() : "";
  return type ? `${last}: ${type}` : last;
}

function groupHead(group, open) {
  return `${open ? "▾" : "▸"} ${groupLabel(group)} · ${group.size}`;
}

export class GraphView {
  constructor({ svg, onNode, onWeight, onChange }) {
    this.svg = svg;
    this.onNode = onNode;
    this.onWeight = onWeight;
    this.onChange = onChange || (() => {});
    this.model = null;
    this.expanded = new Set([""]);
    this.cache = new Map(); // group path → {width, height, items}
    this.view = { x: 0, y: 0, k: 1 };
    this.selected = null;
    this.viewport = el("g", { class: "viewport" }, svg);
    this.installPanZoom();
  }

  setModel(model) {
    this.model = model;
    this.expanded = new Set([""]);
    this.cache.clear();
    this.selected = null;
    // open single-child wrappers (GPT-2's "transformer") so the first view shows the blocks
    let path = "";
    for (let i = 0; i < 4; i++) {
      const kids = model.groups.get(path).children.filter((c) => c.kind === "group");
      const nodes = model.groups.get(path).children.filter((c) => c.kind === "node");
      if (kids.length !== 1 || nodes.length > 12) break;
      path = kids[0].id.slice(2);
      this.expanded.add(path);
    }
  }

  clear() {
    this.model = null;
    this.viewport.replaceChildren();
  }

  isExpanded(path) {
    return this.expanded.has(path);
  }

  /** Expand or collapse a group, keeping its header where it was on screen. */
  toggle(path) {
    const before = this.positions && this.positions.get(`g:${path}`);
    if (this.expanded.has(path)) this.collapse(path);
    else this.expand(path);
    const after = this.positions && this.positions.get(`g:${path}`);
    if (before && after) {
      this.view.x += (before.left - after.left) * this.view.k;
      this.view.y += (before.top - after.top) * this.view.k;
      this.applyView();
    }
  }

  expand(path) {
    if (this.expanded.has(path)) return;
    this.expanded.add(path);
    this.invalidate(path);
    this.render();
  }

  collapse(path) {
    if (!this.expanded.has(path) || path === "") return;
    this.expanded.delete(path);
    this.invalidate(path);
    this.render();
  }

  collapseAll() {
    this.expanded = new Set([""]);
    this.cache.clear();
    this.render();
    this.fit();
  }

  invalidate(path) {
    for (let p = path; p !== null && p !== undefined; p = this.model.groups.get(p).parent) this.cache.delete(p);
  }

  /** Expand every group holding the node, select it and bring it into view. */
  reveal(name) {
    const node = this.model.byName.get(name);
    if (!node) return false;
    let changed = false;
    for (const path of this.model.chainOf(node.group)) {
      if (!this.expanded.has(path)) {
        this.expanded.add(path);
        this.invalidate(path);
        changed = true;
      }
    }
    this.selected = name;
    this.render();
    const box = this.positions.get(`n:${name}`);
    if (box) this.centerOn(box.x, box.y);
    return changed;
  }

  // ---- layout ---------------------------------------------------------------------------------

  sizeOf(child) {
    if (child.kind === "node") {
      const node = this.model.byName.get(child.id.slice(2));
      const label = opLabel(node);
      const shape = shapeLabel((node.outputs || [])[0]);
      return { width: textWidth(label.length > shape.length ? label : shape), height: NODE_H };
    }
    const path = child.id.slice(2);
    if (this.expanded.has(path)) {
      const inner = this.layoutGroup(path);
      return { width: inner.width + 2 * PAD, height: inner.height + GROUP_HEAD + PAD };
    }
    const group = this.model.groups.get(path);
    return { width: textWidth(groupHead(group, false)) * 1.1, height: NODE_H + 6 }; // bold text is wider
  }

  layoutGroup(path) {
    const cached = this.cache.get(path);
    if (cached) return cached;
    const group = this.model.groups.get(path);
    const g = new graphlib.Graph();
    g.setGraph({ rankdir: "TB", nodesep: 18, ranksep: 26, marginx: 0, marginy: 0 });
    g.setDefaultEdgeLabel(() => ({}));
    for (const child of group.children) g.setNode(child.id, this.sizeOf(child));
    for (const [u, v] of this.model.edgesAt.get(path) || []) g.setEdge(u, v);
    dagreLayout(g);
    const items = group.children.map((child) => {
      const n = g.node(child.id);
      return { ...child, x: n.x, y: n.y, width: n.width, height: n.height };
    });
    const edges = g.edges().map((e) => ({ from: e.v, to: e.w, points: g.edge(e).points }));
    const box = g.graph();
    const result = { width: Math.max(box.width || 0, 80), height: Math.max(box.height || 0, 20), items, edges };
    this.cache.set(path, result);
    return result;
  }

  // ---- drawing --------------------------------------------------------------------------------

  render() {
    if (!this.model) return;
    const started = performance.now();
    const root = this.layoutGroup("");
    const laidOut = performance.now();
    const edgeLayer = el("g", { class: "edges" });
    const boxLayer = el("g", { class: "boxes" });
    const nodeLayer = el("g", { class: "nodes" });
    this.positions = new Map();
    let drawnNodes = 0;
    const draw = (path, ox, oy) => {
      const lay = this.layoutGroup(path);
      for (const e of lay.edges) {
        const d = e.points.map((p, i) => `${i ? "L" : "M"}${(p.x + ox).toFixed(1)},${(p.y + oy).toFixed(1)}`).join("");
        el("path", { d, class: "edge", "marker-end": "url(#arrow)" }, edgeLayer);
      }
      for (const item of lay.items) {
        const x = item.x + ox - item.width / 2;
        const y = item.y + oy - item.height / 2;
        this.positions.set(item.id, { x: item.x + ox, y: item.y + oy, left: x, top: y });
        if (item.kind === "group") {
          const gpath = item.id.slice(2);
          const group = this.model.groups.get(gpath);
          const open = this.expanded.has(gpath);
          const gEl = el("g", { class: `group${open ? " open" : ""}`, "data-testid": "graph-group",
            "data-module": gpath, transform: `translate(${x},${y})` }, open ? boxLayer : nodeLayer);
          el("rect", { width: item.width, height: item.height, rx: 6 }, gEl);
          const head = el("text", { x: 8, y: open ? 16 : item.height / 2 + 4, class: "group-label" }, gEl);
          head.textContent = clip(groupHead(group, open), item.width / 1.1);
          el("title", {}, gEl).textContent = `${gpath} (${group.type}) — ${group.size} nodes; click to ${open ? "collapse" : "expand"}`;
          if (open) draw(gpath, x + PAD, y + GROUP_HEAD);
        } else {
          const node = this.model.byName.get(item.id.slice(2));
          drawnNodes += 1;
          const kind = node.op === "placeholder" ? (node.tensor ? "weight" : "input") : node.op === "output" ? "output" : "op";
          const nEl = el("g", { class: `node ${kind}${this.selected === node.name ? " selected" : ""}`,
            "data-testid": "graph-node", "data-name": node.name, transform: `translate(${x},${y})` }, nodeLayer);
          if (node.tensor) nEl.dataset.tensor = node.tensor;
          el("rect", { width: item.width, height: item.height, rx: kind === "op" ? 4 : 12 }, nEl);
          const t1 = el("text", { x: item.width / 2, y: 14, class: "label" }, nEl);
          t1.textContent = clip(opLabel(node), item.width);
          const t2 = el("text", { x: item.width / 2, y: 27, class: "shape" }, nEl);
          t2.textContent = clip(shapeLabel((node.outputs || [])[0]), item.width);
          el("title", {}, nEl).textContent = `${node.name}: ${node.op === "call_function" ? node.target : kind}${node.tensor ? ` ${node.tensor}` : ""}`;
        }
      }
    };
    draw("", 0, 0);
    const defs = el("defs", {});
    const marker = el("marker", { id: "arrow", viewBox: "0 0 8 8", refX: 8, refY: 4, markerWidth: 7, markerHeight: 7, orient: "auto" }, defs);
    el("path", { d: "M0,0 L8,4 L0,8 z", class: "arrow" }, marker);
    this.viewport.replaceChildren(defs, boxLayer, edgeLayer, nodeLayer);
    this.size = { width: root.width, height: root.height };
    this.applyView();
    this.stats = { layoutMs: laidOut - started, totalMs: performance.now() - started, drawnNodes };
    this.onChange(this.stats);
  }

  // ---- pan and zoom ---------------------------------------------------------------------------

  applyView() {
    const { x, y, k } = this.view;
    this.viewport.setAttribute("transform", `translate(${x},${y}) scale(${k})`);
  }

  fit() {
    const w = this.svg.clientWidth || 800;
    const h = this.svg.clientHeight || 600;
    if (!this.size) return;
    const k = Math.min(1.2, Math.max(0.05, Math.min((w - 20) / this.size.width, (h - 20) / this.size.height)));
    // tall graphs: fit the width, start at the top
    const kk = this.size.height * k < h * 0.25 ? k : Math.min(1, Math.max(k, (w - 20) / this.size.width));
    this.view = { k: kk, x: (w - this.size.width * kk) / 2, y: 10 };
    this.applyView();
  }

  centerOn(x, y) {
    const w = this.svg.clientWidth || 800;
    const h = this.svg.clientHeight || 600;
    const k = Math.max(this.view.k, 0.8);
    this.view = { k, x: w / 2 - x * k, y: h / 2 - y * k };
    this.applyView();
  }

  zoomBy(factor, cx, cy) {
    const k = Math.min(4, Math.max(0.03, this.view.k * factor));
    const f = k / this.view.k;
    this.view = { k, x: cx - (cx - this.view.x) * f, y: cy - (cy - this.view.y) * f };
    this.applyView();
  }

  installPanZoom() {
    let drag = null;
    this.svg.addEventListener("wheel", (event) => {
      event.preventDefault();
      const rect = this.svg.getBoundingClientRect();
      if (event.ctrlKey || event.metaKey || !event.shiftKey) {
        this.zoomBy(Math.exp(-event.deltaY / 400), event.clientX - rect.left, event.clientY - rect.top);
      }
    }, { passive: false });
    this.svg.addEventListener("pointerdown", (event) => {
      drag = { x: event.clientX, y: event.clientY, vx: this.view.x, vy: this.view.y, moved: false };
    });
    this.svg.addEventListener("pointermove", (event) => {
      if (!drag) return;
      const dx = event.clientX - drag.x;
      const dy = event.clientY - drag.y;
      if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
      if (!drag.moved) this.svg.setPointerCapture(event.pointerId);
      drag.moved = true;
      this.view.x = drag.vx + dx;
      this.view.y = drag.vy + dy;
      this.applyView();
    });
    const end = (event) => {
      const moved = drag && drag.moved;
      drag = null;
      if (moved) {
        if (this.svg.hasPointerCapture(event.pointerId)) this.svg.releasePointerCapture(event.pointerId);
        return;
      }
      if (event.type !== "pointerup") return;
      const target = event.target.closest("[data-testid=graph-node], [data-testid=graph-group]");
      if (!target) return;
      if (target.dataset.module !== undefined) this.toggle(target.dataset.module);
      else this.clickNode(target.dataset.name);
    };
    this.svg.addEventListener("pointerup", end);
    this.svg.addEventListener("pointercancel", end);
  }

  clickNode(name) {
    const node = this.model.byName.get(name);
    this.selected = name;
    for (const e of this.viewport.querySelectorAll(".node.selected")) e.classList.remove("selected");
    const elNode = this.viewport.querySelector(`[data-testid=graph-node][data-name="${CSS.escape(name)}"]`);
    if (elNode) elNode.classList.add("selected");
    if (node.tensor && this.onWeight) this.onWeight(node);
    else if (this.onNode) this.onNode(node);
  }
}
