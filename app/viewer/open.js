// The Open box and its shareable links: #/open/<location> opens one location and shows it,
// #/open/<a>/<b> opens two and shows the compare view (each part encodeURIComponent'ed). Shown only
// when the service allows opening (--allow-open: the patterns GET /archives lists); a refusal shows
// the service's reason (the rule that refused it).

import { getJSON, urls } from "./api.js";

const $ = (id) => document.getElementById(id);
const enc = encodeURIComponent;

/** The locations an #/open/... link names, or null. */
export function openRoute(hash = location.hash) {
  if (!hash.startsWith("#/open/")) return null;
  const parts = hash.slice("#/open/".length).split("/").filter(Boolean).map(decodeURIComponent);
  return parts.length ? parts.slice(0, 2) : null;
}

export const openHash = (locations) => `#/open/${locations.map(enc).join("/")}`;

/** Where the page goes once the locations are open: the archive, or the compare view of two. */
export const shownHash = (ids) =>
  ids.length === 2 ? `#/compare/${enc(ids[0])}/${enc(ids[1])}` : `#/archive/${enc(ids[0])}`;

function showRefusal(message) {
  $("open-error").textContent = message || "";
  $("open-error").hidden = !message;
}

/** Open each location (POST /archives/open); the archive ids, or null after showing why not. */
export async function openAll(locations) {
  showRefusal("");
  const ids = [];
  for (const where of locations) {
    try {
      const archive = await getJSON(urls.open(), { method: "POST", json: { location: where } });
      ids.push(archive.id);
    } catch (err) {
      showRefusal(`Could not open ${where}: ${err.message}`);
      return null;
    }
  }
  return ids;
}

/** Show the box when patterns allow opening; `onOpened(ids, locations)` runs after an open. */
export function setupOpenBox(patterns, onOpened) {
  const form = $("open-form");
  form.hidden = !patterns.length;
  $("open-patterns").textContent = patterns.join("  ");
  if (form.dataset.ready) return;
  form.dataset.ready = "1";
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const where = $("open-input").value.trim();
    if (!where) return;
    const ids = await openAll([where]);
    if (ids) await onOpened(ids, [where]);
  });
}

/** The share link of the archive shown: for an opened one, the link that opens it again. */
export function showShareLink(info) {
  const link = $("open-share");
  link.hidden = !info.opened;
  if (info.opened) link.href = openHash([info.location]);
}
