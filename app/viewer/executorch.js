// ExecuTorch downloads beside the safetensors link: the same selection as an ExecuTorch .ptd data
// file, and the programs (.pte) the archive carries under data/executorch/.

import { arc } from "./api.js";

const enc = encodeURIComponent;

// Mirror the safetensors link (same selection, same state) onto the .ptd link.
export function syncPtdLink() {
  const bundle = document.getElementById("download-selection");
  const link = document.getElementById("download-ptd");
  if (!bundle || !link) return;
  const href = bundle.getAttribute("href") || "#";
  const usable = href !== "#" && !bundle.classList.contains("disabled");
  link.classList.toggle("disabled", !usable);
  link.href = usable ? href.replace(/\/safetensors(?=\?|$)/, "/ptd") : "#";
  link.textContent = bundle.textContent.replace(/^safetensors/, ".ptd");
}

// One download link per program the archive (an entry of /archives) carries.
export function renderPrograms(archive) {
  const box = document.getElementById("executorch-programs");
  if (!box) return;
  const files = (archive && archive.executorch) || [];
  box.replaceChildren(
    ...files.map((name) => {
      const link = document.createElement("a");
      link.className = "button";
      const pinned = archive.version ? `${archive.id}@${archive.version}` : archive.id; // immutable URL
      link.href = `/archives/${arc(pinned)}/executorch/${name.split("/").map(enc).join("/")}`;
      link.download = name.split("/").pop();
      link.textContent = name;
      link.title = "ExecuTorch program stored in this archive";
      link.dataset.testid = "executorch-program";
      return link;
    }),
  );
  box.hidden = files.length === 0;
}
