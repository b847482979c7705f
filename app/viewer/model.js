// Pure functions over the tensor listing: summary, search, sort, shared payloads, module tree.

export function formatBytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${n} B` : `${value.toFixed(value < 10 ? 2 : 1)} ${units[unit]}`;
}

export function formatCount(n) {
  return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US");
}

export function shapeText(t) {
  return t.sizes ? `[${t.sizes.join(", ")}]` : "—";
}

/** Dim order as the table and the detail panel both show it: "[0, 2, 3, 1]". */
export function dimOrderText(t) {
  return t.dim_order ? `[${t.dim_order.join(", ")}]` : "—";
}

/** Names with equal keys are one tensor under several names (tied weights): same payload, same view. */
export function aliasKey(t) {
  if (!t.storage || !t.storage.entry || !t.sizes) return null;
  return [t.storage.entry, t.storage_offset, t.sizes.join(","), (t.strides || []).join(","), t.dtype].join("|");
}

/** Decorate the server's layouts with what the table needs (once per listing). */
export function prepare(tensors) {
  const byEntry = new Map();
  for (const t of tensors) {
    const entry = t.storage && t.storage.entry;
    if (!entry) continue;
    if (!byEntry.has(entry)) byEntry.set(entry, []);
    byEntry.get(entry).push(t.name);
  }
  return tensors.map((t, index) => {
    const sharing = (byEntry.get(t.storage && t.storage.entry) || []).filter((n) => n !== t.name);
    return {
      index,
      t,
      name: t.name,
      lower: t.name.toLowerCase(),
      kind: t.kind,
      dtype: t.dtype || "—",
      shape: shapeText(t),
      numel: t.numel ?? -1,
      bytes: t.nbytes ?? -1,
      dimOrder: dimOrderText(t),
      sharedWith: sharing,
      shared: sharing.length ? sharing[0] + (sharing.length > 1 ? ` +${sharing.length - 1}` : "") : "",
    };
  });
}

/**
 * Counts for the summary, without counting twice what is stored once: parameters and element
 * counts over unique tensors (tied names count once), bytes over unique payload entries.
 */
export function summarize(tensors) {
  const byDtype = new Map();
  const entries = new Map();
  const seenKeys = new Set();
  let params = 0;
  let aliases = 0;
  const kinds = { weight: 0, constant: 0, custom_object: 0 };
  for (const t of tensors) {
    kinds[t.kind] = (kinds[t.kind] || 0) + 1;
    const key = aliasKey(t);
    if (key !== null && seenKeys.has(key)) {
      aliases += 1;
    } else {
      if (key !== null) seenKeys.add(key);
      if (t.kind === "weight" && t.numel) params += t.numel;
    }
    if (t.storage && t.storage.entry) {
      const e = entries.get(t.storage.entry);
      if (e) e.names += 1;
      else entries.set(t.storage.entry, { names: 1, nbytes: t.storage.nbytes || 0, dtype: t.dtype || "?" });
    }
  }
  let bytes = 0;
  for (const e of entries.values()) {
    bytes += e.nbytes;
    byDtype.set(e.dtype, (byDtype.get(e.dtype) || 0) + e.nbytes);
  }
  const shared = [...entries.values()].filter((e) => e.names > 1).length;
  const dtypes = [...byDtype.entries()].sort((a, b) => b[1] - a[1]);
  return { count: tensors.length, aliases, params, bytes, kinds, shared, dtypes };
}

function globToRegExp(glob) {
  let source = "";
  for (const ch of glob) {
    if (ch === "*") source += ".*";
    else if (ch === "?") source += ".";
    else source += ch.replace(/[.+^${}()|[\]\\/-]/g, "\\$&");
  }
  return new RegExp(`^${source}$`, "i");
}

/** A predicate over prepared rows: substring (case-insensitive), or a whole-name glob with * or ?. */
export function matcher(query) {
  const q = query.trim();
  if (!q) return null;
  if (/[*?]/.test(q)) {
    const re = globToRegExp(q);
    return (row) => re.test(row.name);
  }
  const lower = q.toLowerCase();
  return (row) => row.lower.includes(lower);
}

const collator = new Intl.Collator("en", { numeric: true });
const NUMERIC = new Set(["bytes", "numel"]);

export function sortRows(rows, key, descending) {
  const sign = descending ? -1 : 1;
  const field = key === "shape" ? "numel" : key;
  const out = rows.slice();
  if (NUMERIC.has(field)) {
    out.sort((a, b) => sign * (a[field] - b[field]) || collator.compare(a.name, b.name));
  } else {
    out.sort((a, b) => sign * collator.compare(a[field], b[field]) || a.index - b.index);
  }
  return out;
}

/**
 * Group rows by module prefix (split on "."): returns the visible list of items,
 * groups ({group: true, prefix, label, depth, count, bytes}) and leaves ({row, depth}),
 * skipping the children of collapsed prefixes. Single-child chains are not merged.
 */
export function treeItems(rows, collapsed) {
  const root = { children: new Map(), leaves: [], count: 0, bytes: 0 };
  for (const row of rows) {
    const parts = row.name.split(".");
    let node = root;
    node.count += 1;
    node.bytes += Math.max(row.bytes, 0);
    for (let i = 0; i < parts.length - 1; i++) {
      const part = parts[i];
      if (!node.children.has(part)) {
        node.children.set(part, {
          children: new Map(), leaves: [], count: 0, bytes: 0,
          prefix: parts.slice(0, i + 1).join(".") + ".", label: part,
        });
      }
      node = node.children.get(part);
      node.count += 1;
      node.bytes += Math.max(row.bytes, 0);
    }
    node.leaves.push(row);
  }
  const items = [];
  const walk = (node, depth) => {
    for (const row of node.leaves) items.push({ row, depth }); // a module's own tensors first
    for (const child of node.children.values()) {
      const isCollapsed = collapsed.has(child.prefix);
      items.push({ group: true, prefix: child.prefix, label: child.label, depth, count: child.count,
        bytes: child.bytes, collapsed: isCollapsed });
      if (!isCollapsed) walk(child, depth + 1);
    }
  };
  walk(root, 0);
  return items;
}
