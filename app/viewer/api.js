// Same-origin JSON calls to the pt2serve HTTP API; errors become Error objects with the server's message.
// Behind PT2SERVE_API_TOKEN: the token lives in sessionStorage (this tab only) and goes out as
// Authorization on every call; links the browser follows itself (downloads, curl) are signed instead.

const TOKEN_KEY = "pt2serve.token";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export const auth = {
  get token() {
    try {
      return sessionStorage.getItem(TOKEN_KEY);
    } catch {
      return null;
    }
  },
  set token(value) {
    try {
      if (value) sessionStorage.setItem(TOKEN_KEY, value);
      else sessionStorage.removeItem(TOKEN_KEY);
    } catch {
      /* storage disabled: the token is asked again on the next load */
    }
  },
  answered401: false,
  /** True once the service has refused a call without a token, or a token is in use at all. */
  get required() {
    return this.answered401 || Boolean(this.token);
  },
};

/** A JSON answer of `url`; `json`: a value sent as the request's JSON body (with `method`). */
export async function getJSON(url, { signal, method = "GET", json = undefined } = {}) {
  const headers = { Accept: "application/json" };
  const token = auth.token;
  if (token) headers.Authorization = `Bearer ${token}`;
  if (json !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(url, { headers, signal, method, body: json === undefined ? undefined : JSON.stringify(json) });
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
    if (response.status === 401) auth.answered401 = true;
    const error = body && body.error ? body.error : { code: "http_error", message: response.statusText };
    throw new ApiError(response.status, error.code, error.message || `HTTP ${response.status}`);
  }
  return body;
}

/** A short-lived signed form of a same-origin GET URL (no token in it), or the URL itself when
 * the service needs no token. */
export async function signedUrl(url) {
  if (!auth.required) return url;
  const body = await getJSON(`/sign?path=${encodeURIComponent(url)}`);
  return body.url;
}

/** A URL component percent-encoded strictly (RFC 3986): encodeURIComponent leaves !'()* as they
 * are, and a ' in a URL would end the quoted word of a copied shell command. */
function enc(text) {
  return encodeURIComponent(text).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** An archive id, or `{id}@{version}` with its `@` as the service spells it (ids hold no `@`):
 * every client of a versioned URL then names it alike, and an edge cache keeps one copy. */
export function arc(archive) {
  return archive.split("@").map(enc).join("@");
}

export function encodeName(name) {
  return enc(name);
}

function modelQuery(model, sep = "?") {
  return model ? `${sep}model=${enc(model)}` : "";
}

export const urls = {
  archives: () => "/archives",
  open: () => "/archives/open",
  tensors: (archive, model) => `/archives/${arc(archive)}/tensors${modelQuery(model)}`,
  stats: (archive, name, model) => `/archives/${arc(archive)}/tensors/${enc(name)}/stats${modelQuery(model)}`,
  consumers: (archive, name, model) =>
    `/archives/${arc(archive)}/tensors/${enc(name)}/consumers${modelQuery(model)}`,
  graph: (archive, model) => `/archives/${arc(archive)}/graph${modelQuery(model)}`,
  data(archive, name, model, format = "raw", slice = null) {
    const params = new URLSearchParams();
    if (model) params.set("model", model);
    if (format !== "raw") params.set("format", format);
    if (slice !== null) params.set("slice", slice);
    const query = params.toString();
    return `/archives/${arc(archive)}/tensors/${enc(name)}/data${query ? "?" + query : ""}`;
  },
  safetensors(archive, model, { names = null, prefix = null } = {}) {
    const params = new URLSearchParams();
    if (model) params.set("model", model);
    if (prefix) params.set("prefix", prefix);
    for (const name of names || []) params.append("name", name);
    const query = params.toString();
    return `/archives/${arc(archive)}/safetensors${query ? "?" + query : ""}`;
  },
};
