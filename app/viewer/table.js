// A virtualized table: a fixed row height, and only the rows in view (plus a margin) are in the DOM.

import { formatBytes, formatCount } from "./model.js";

const OVERSCAN = 8;

export class VirtualTable {
  constructor({ scroller, spacer, rows, rowHeight, onActivate, onCursor }) {
    this.scroller = scroller;
    this.spacer = spacer;
    this.rowsEl = rows;
    this.rowHeight = rowHeight;
    this.onActivate = onActivate;
    this.onCursor = onCursor;
    this.items = [];
    this.cursor = -1;
    this.pending = false;
    this.firstRowsAt = null;
    scroller.addEventListener("scroll", () => this.schedule());
    window.addEventListener("resize", () => this.schedule());
    this.rowsEl.addEventListener("click", (event) => {
      const el = event.target.closest(".row");
      if (!el) return;
      const i = Number(el.dataset.index);
      this.setCursor(i, false);
      this.onActivate(this.items[i], i);
    });
  }

  setItems(items, keepCursorKey = null) {
    this.items = items;
    this.spacer.style.height = `${items.length * this.rowHeight}px`;
    let cursor = -1;
    if (keepCursorKey !== null) cursor = items.findIndex((item) => itemKey(item) === keepCursorKey);
    this.cursor = cursor;
    if (cursor < 0 && this.scroller.scrollTop > items.length * this.rowHeight) this.scroller.scrollTop = 0;
    this.render();
  }

  cursorItem() {
    return this.cursor >= 0 ? this.items[this.cursor] : null;
  }

  setCursor(index, scroll = true) {
    if (!this.items.length) return;
    this.cursor = Math.max(0, Math.min(this.items.length - 1, index));
    if (scroll) this.scrollTo(this.cursor);
    this.render();
    if (this.onCursor) this.onCursor(this.items[this.cursor], this.cursor);
  }

  scrollTo(index) {
    const top = index * this.rowHeight;
    // the sticky header row covers the top of the scroller
    const view = this.scroller.clientHeight - this.spacer.offsetTop;
    if (top < this.scroller.scrollTop) this.scroller.scrollTop = top;
    else if (top + this.rowHeight > this.scroller.scrollTop + view) {
      this.scroller.scrollTop = top + this.rowHeight - view;
    }
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.render();
    });
  }

  render() {
    const h = this.rowHeight;
    const view = this.scroller.clientHeight || 600;
    const first = Math.max(0, Math.floor(this.scroller.scrollTop / h) - OVERSCAN);
    const last = Math.min(this.items.length, Math.ceil((this.scroller.scrollTop + view) / h) + OVERSCAN);
    this.rowsEl.style.transform = `translateY(${first * h}px)`;
    const fragment = document.createDocumentFragment();
    for (let i = first; i < last; i++) fragment.append(this.renderRow(this.items[i], i));
    this.rowsEl.replaceChildren(fragment);
    if (last > first && this.firstRowsAt === null) {
      this.firstRowsAt = performance.now();
      window.__pt2FirstRowsAt = this.firstRowsAt;
    }
  }

  renderRow(item, i) {
    const el = document.createElement("div");
    el.className = "row";
    el.dataset.index = String(i);
    el.setAttribute("role", "row");
    if (i === this.cursor) el.classList.add("cursor");
    const indent = item.depth ? `${item.depth * 16}px` : "";
    if (item.group) {
      el.classList.add("group");
      if (item.collapsed) el.classList.add("collapsed");
      el.dataset.testid = "group-row";
      el.dataset.prefix = item.prefix;
      const name = cell("name span4", "");
      name.style.paddingLeft = indent;
      name.title = `${item.prefix}* — ${item.count} tensors`;
      const label = document.createElement("span");
      label.className = "mono";
      label.textContent = item.depth ? item.label : item.prefix.slice(0, -1);
      const count = document.createElement("span");
      count.className = "muted count";
      count.textContent = ` ${formatCount(item.count)} tensor${item.count === 1 ? "" : "s"}`;
      name.append(label, count);
      el.append(name, cell("num", formatBytes(item.bytes)), cell("col-extra", ""), cell("col-extra", ""));
      return el;
    }
    const row = item.row;
    el.dataset.testid = "tensor-row";
    el.dataset.name = row.name;
    const name = cell("name mono", item.depth ? row.name.split(".").pop() : row.name);
    name.title = row.t.unsupported ? `${row.name} — ${row.t.unsupported}` : row.name;
    name.style.paddingLeft = indent;
    if (row.t.unsupported) name.classList.add("unsupported");
    const shared = cell("muted mono col-extra", row.shared);
    shared.title = row.sharedWith.join(", ");
    el.append(name, cell("", row.kind), cell("mono", row.dtype), cell("mono", row.shape),
      cell("num", row.bytes >= 0 ? formatBytes(row.bytes) : "—"), cell("mono col-extra", row.dimOrder), shared);
    return el;
  }
}

export function itemKey(item) {
  if (!item) return null;
  return item.group ? `g:${item.prefix}` : `t:${item.row.name}`;
}

function cell(className, text) {
  const el = document.createElement("span");
  if (className) el.className = className;
  el.textContent = text;
  return el;
}
