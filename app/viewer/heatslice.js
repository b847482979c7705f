// The heat map of a large tensor from only the rows it draws: one GET of `data?slice=` (evenly
// spaced rows of its 2-D view, and evenly spaced columns of a wide matrix), so the service reads
// those rows' bytes and nothing else, block-averaged here the way /stats averages a small tensor.

import { auth, urls } from "./api.js";

/** At most this many rows and columns of block means (as /stats' HEATMAP_SIZE). */
export const HEATMAP_SIZE = 64;
/** Tensors larger than this are sampled by /stats (its SMALL_BYTES); their map comes from a slice. */
export const SLICE_HEATMAP_MIN_BYTES = 16 << 20;
/** A matrix's columns are sampled down to this many: each map cell then averages up to 16 of them. */
const MAX_COLUMNS = 1024;
/** What one sliced fetch may bring (a tensor of more than 2 dims keeps its whole rows). */
const MAX_SLICE_BYTES = 4 << 20;

// dtype -> [item size, read one little-endian value from a DataView as a Number]
const DECODERS = {
  float32: [4, (v, o) => v.getFloat32(o, true)],
  float64: [8, (v, o) => v.getFloat64(o, true)],
  float16: [2, (v, o) => half(v.getUint16(o, true))],
  bfloat16: [2, (v, o) => bfloat16(v, o)],
  int8: [1, (v, o) => v.getInt8(o)],
  uint8: [1, (v, o) => v.getUint8(o)],
  bool: [1, (v, o) => v.getUint8(o)],
  int16: [2, (v, o) => v.getInt16(o, true)],
  uint16: [2, (v, o) => v.getUint16(o, true)],
  int32: [4, (v, o) => v.getInt32(o, true)],
  uint32: [4, (v, o) => v.getUint32(o, true)],
  int64: [8, (v, o) => Number(v.getBigInt64(o, true))],
  uint64: [8, (v, o) => Number(v.getBigUint64(o, true))],
};

const scratch = new DataView(new ArrayBuffer(4));

function bfloat16(view, offset) {
  scratch.setUint32(0, view.getUint16(offset, true) << 16, true);
  return scratch.getFloat32(0, true);
}

function half(bits) {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const fraction = bits & 0x3ff;
  if (exponent === 0) return sign * 2 ** -14 * (fraction / 1024);
  if (exponent === 0x1f) return fraction ? NaN : sign * Infinity;
  return sign * 2 ** (exponent - 15) * (1 + fraction / 1024);
}

/** The slice whose rows the heat map draws, or null when this tensor's map does not come from one:
 * small tensors (/stats maps them exactly), dtypes decoded only by the service, layouts whose rows
 * are not runs of memory (a transposed matrix's row is a strided column: reading it reads most of
 * the tensor), and rows too wide to bring. */
export function heatmapSlice(t) {
  const sizes = t.sizes;
  if (!sizes || sizes.length < 2 || !t.dense || !t.numel || !DECODERS[t.dtype]) return null;
  if (t.nbytes <= SLICE_HEATMAP_MIN_BYTES) return null;
  if (!(t.dim_order || []).every((d, i) => d === i)) return null;
  const rows = sizes[0];
  if (rows < 2) return null;
  const rowStep = Math.ceil(rows / HEATMAP_SIZE);
  const picked = Math.ceil(rows / rowStep);
  const parts = [`0:${rows}:${rowStep}`];
  let width = sizes.slice(1).reduce((a, b) => a * b, 1);
  if (sizes.length === 2 && sizes[1] > MAX_COLUMNS) {
    const colStep = Math.ceil(sizes[1] / MAX_COLUMNS);
    parts.push(`0:${sizes[1]}:${colStep}`);
    width = Math.ceil(sizes[1] / colStep);
  } else {
    parts.push("...");
  }
  if (picked * width * t.itemsize > MAX_SLICE_BYTES) return null;
  return parts.join(",");
}

/** Fetch the slice and average it into at most HEATMAP_SIZE x HEATMAP_SIZE blocks: a heat map as
 * /stats gives one (`rows`/`cols` are the tensor's 2-D view), plus the `slice` it came from. */
export async function slicedHeatmap(archive, model, t, slice, { signal } = {}) {
  const headers = {};
  if (auth.token) headers.Authorization = `Bearer ${auth.token}`;
  const response = await fetch(urls.data(archive, t.name, model, "raw", slice), { headers, signal });
  if (!response.ok) throw new Error(`the heat map's slice failed: HTTP ${response.status}`);
  const shape = (response.headers.get("x-tensor-shape") || "").split(",").map(Number);
  const buffer = await response.arrayBuffer();
  const [itemsize, read] = DECODERS[t.dtype];
  const count = buffer.byteLength / itemsize;
  const rows = shape[0] || 0;
  const cols = rows ? count / rows : 0;
  const view = new DataView(buffer);
  const values = new Float64Array(count);
  for (let i = 0; i < count; i++) values[i] = read(view, i * itemsize);
  return {
    ...blockMeans(values, rows, cols),
    rows: t.sizes[0],
    cols: t.sizes.slice(1).reduce((a, b) => a * b, 1),
    slice,
  };
}

function blockStarts(n) {
  const k = Math.min(n, HEATMAP_SIZE);
  const starts = [];
  for (let i = 0; i < k; i++) {
    const s = Math.floor((i * n) / k);
    if (!starts.length || starts[starts.length - 1] !== s) starts.push(s);
  }
  return starts;
}

/** Means of the finite values of each block (null where a block has none), and their range. */
function blockMeans(values, rows, cols) {
  const rowStarts = blockStarts(rows);
  const colStarts = blockStarts(cols);
  const grid = [];
  let min = null;
  let max = null;
  for (let r = 0; r < rowStarts.length; r++) {
    const rowEnd = r + 1 < rowStarts.length ? rowStarts[r + 1] : rows;
    const line = [];
    for (let c = 0; c < colStarts.length; c++) {
      const colEnd = c + 1 < colStarts.length ? colStarts[c + 1] : cols;
      let sum = 0;
      let n = 0;
      for (let i = rowStarts[r]; i < rowEnd; i++) {
        for (let j = colStarts[c]; j < colEnd; j++) {
          const x = values[i * cols + j];
          if (Number.isFinite(x)) {
            sum += x;
            n++;
          }
        }
      }
      const mean = n ? sum / n : null;
      if (mean !== null) {
        min = min === null ? mean : Math.min(min, mean);
        max = max === null ? mean : Math.max(max, mean);
      }
      line.push(mean);
    }
    grid.push(line);
  }
  return { values: grid, min, max };
}
