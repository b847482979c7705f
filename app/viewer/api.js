// Same-origin JSON calls to the pt2serve HTTP API; errors become Error objects with the server's message.

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export async function getJSON(url, { signal } = {}) {
  let response;
  try {
    response = await fetch(url, { headers: { Accept: "application/json" }, signal });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "network", `network error: ${err.message}`);
  }
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!response.ok) {
    const error = body && body.error ? body.error : { code: "http_error", message: response.statusText };
    throw new ApiError(response.status, error.code, error.message || `HTTP ${response.status}`);
  }
  return body;
}

const enc = encodeURIComponent;

export function encodeName(name) {
  return enc(name);
}

function modelQuery(model, sep = "?") {
  return model ? `${sep}model=${enc(model)}` : "";
}

export const urls = {
  archives: () => "/archives",
  tensors: (archive, model) => `/archives/${enc(archive)}/tensors${modelQuery(model)}`,
  stats: (archive, name, model) => `/archives/${enc(archive)}/tensors/${enc(name)}/stats${modelQuery(model)}`,
  data(archive, name, model, format = "raw") {
    const params = new URLSearchParams();
    if (model) params.set("model", model);
    if (format !== "raw") params.set("format", format);
    const query = params.toString();
    return `/archives/${enc(archive)}/tensors/${enc(name)}/data${query ? "?" + query : ""}`;
  },
  safetensors(archive, model, { names = null, prefix = null } = {}) {
    const params = new URLSearchParams();
    if (model) params.set("model", model);
    if (prefix) params.set("prefix", prefix);
    for (const name of names || []) params.append("name", name);
    const query = params.toString();
    return `/archives/${enc(archive)}/safetensors${query ? "?" + query : ""}`;
  },
};
