// The program graph as the view needs it: module groups (from nn_module_stack), which group each
// node sits in, and every edge assigned to the one group level where it is drawn. Pure functions.

const ROOT = "";

/** Short op label: "aten.linear.default" → "linear", "aten.add.Tensor" → "add". */
export function opLabel(node) {
  if (node.op === "placeholder") return node.tensor || node.name;
  if (node.op === "output") return "output";
  const parts = node.target.split(".");
  return parts.length >= 3 && parts[0] === "aten" ? parts[1] : node.target;
}

export function shapeLabel(output) {
  if (!output || !output.shape) return "";
  return `${output.dtype || "?"}[${output.shape.map((s) => (s === null ? "?" : s)).join(", ")}]`;
}

function commonAncestor(a, b, parentOf) {
  if (a === b) return a;
  const seen = new Set();
  for (let m = a; m !== null && m !== undefined; m = parentOf(m)) seen.add(m);
  for (let m = b; m !== null && m !== undefined; m = parentOf(m)) if (seen.has(m)) return m;
  return ROOT;
}

/**
 * Build the grouped model of a /graph response:
 *   nodes[i] gets .group (module path, "" = top level), .index;
 *   groups: Map path → {path, type, parent, children: [{kind: "group"|"node", id}], size (nodes below)};
 *   edgesAt: Map group path → [[childId, childId], ...] (child ids: "n:<name>" or "g:<path>").
 * Weight, buffer and constant placeholders go in the deepest module that holds all their readers.
 */
export function buildGraphModel(data) {
  const modules = data.modules || {};
  const parentOf = (path) => {
    if (path === ROOT) return null;
    const info = modules[path];
    return info && info.parent !== null && info.parent !== undefined && info.parent !== path ? info.parent : ROOT;
  };
  const nodes = data.nodes;
  const byName = new Map();
  const producer = new Map();
  nodes.forEach((node, index) => {
    node.index = index;
    byName.set(node.name, node);
    for (const out of node.outputs || []) producer.set(out.name, node);
  });
  const readers = new Map(); // node name → nodes reading it
  const edges = [];
  for (const node of nodes) {
    const seen = new Set();
    for (const arg of node.inputs || []) {
      for (const value of arg.tensors || []) {
        const from = producer.get(value);
        if (!from || seen.has(from.name)) continue;
        seen.add(from.name);
        edges.push([from, node]);
        if (!readers.has(from.name)) readers.set(from.name, []);
        readers.get(from.name).push(node);
      }
    }
  }
  for (const node of nodes) {
    if (node.op === "call_function") node.group = node.module && modules[node.module] ? node.module : ROOT;
  }
  for (const node of nodes) {
    if (node.op === "call_function") continue;
    const users = readers.get(node.name) || [];
    if (node.op === "placeholder" && node.tensor && users.length) {
      node.group = users.map((u) => u.group).reduce((a, b) => commonAncestor(a, b, parentOf));
    } else node.group = ROOT;
  }
  const groups = new Map();
  const group = (path) => {
    let g = groups.get(path);
    if (!g) {
      const info = modules[path] || {};
      g = { path, type: info.type || "", parent: parentOf(path), children: [], size: 0, depth: 0 };
      groups.set(path, g);
      if (g.parent !== null) group(g.parent).children.push({ kind: "group", id: `g:${path}` });
    }
    return g;
  };
  group(ROOT);
  for (const node of nodes) {
    group(node.group).children.push({ kind: "node", id: `n:${node.name}` });
    for (let m = node.group; m !== null; m = parentOf(m)) group(m).size += 1;
  }
  // depth, and each group's chain of ancestors (root first)
  const chain = new Map([[ROOT, [ROOT]]]);
  const chainOf = (path) => {
    if (chain.has(path)) return chain.get(path);
    const c = [...chainOf(parentOf(path)), path];
    chain.set(path, c);
    return c;
  };
  for (const g of groups.values()) g.depth = chainOf(g.path).length - 1;
  // each edge is drawn at the deepest group holding both ends, between that group's children
  const edgesAt = new Map();
  const seenEdge = new Set();
  for (const [from, to] of edges) {
    const a = chainOf(from.group);
    const b = chainOf(to.group);
    let i = 0;
    while (i + 1 < a.length && i + 1 < b.length && a[i + 1] === b[i + 1]) i += 1;
    const at = a[i];
    const u = i + 1 < a.length ? `g:${a[i + 1]}` : `n:${from.name}`;
    const v = i + 1 < b.length ? `g:${b[i + 1]}` : `n:${to.name}`;
    if (u === v) continue;
    const key = `${at}\u0000${u}\u0000${v}`;
    if (seenEdge.has(key)) continue;
    seenEdge.add(key);
    if (!edgesAt.has(at)) edgesAt.set(at, []);
    edgesAt.get(at).push([u, v]);
  }
  return { nodes, byName, groups, edgesAt, chainOf, producer, readers, edgeCount: edges.length };
}

/** Nodes and tensors whose name, op or tensor FQN contains the query (case-insensitive). */
export function searchGraph(model, query, limit = 50) {
  const q = query.trim().toLowerCase();
  if (!q) return [];
  const hits = [];
  for (const node of model.nodes) {
    const fields = [node.name, node.target, node.tensor || "", opLabel(node)];
    if (fields.some((f) => f.toLowerCase().includes(q))) {
      hits.push(node);
      if (hits.length >= limit) break;
    }
  }
  return hits;
}
