// Mesh: peers and the keys they are known by, convergence and lag per journal, recent sync
// incidents.

import { api } from "../api.js";
import { h, attempt, table, when, fill } from "../ui.js";

const POLL_MS = 3000;
let root = null;
let timer = null;

async function load() {
  const mesh = await api("/api/v1/mesh");
  const peers = mesh.peers.map((p) =>
    h("tr", {}, h("td", {}, p.name), h("td", {}, p.url), h("td", { class: "mono wrap" }, p.public_key || "not known yet"), h("td", {}, p.key_source || "")),
  );
  const journals = mesh.journals.map((j) =>
    h(
      "tr",
      {},
      h("td", {}, j.agent),
      h("td", {}, j.home || ""),
      h("td", {}, j.local_seq),
      h("td", {}, j.peers.map((p) => `${p.peer_id}: ${p.acked_seq} (lag ${p.lag})`).join(", ") || "no peers"),
      h("td", {}, h("span", { class: `status ${j.converged ? "active" : "revoked"}` }, j.converged ? "converged" : "behind")),
    ),
  );
  const incidents = mesh.incidents.map((f) =>
    h("tr", {}, h("td", {}, when(f.ts)), h("td", {}, f.severity), h("td", {}, f.title), h("td", {}, f.detail)),
  );
  fill(root?.querySelector("#mesh-body"), 
    h("p", {}, `This node: ${mesh.node}`),
    peers.length ? table(["Peer", "URL", "Public key", "Key from"], peers, "Peers") : h("p", { class: "empty" }, "No peers configured."),
    table(["Journal", "Home", "Local seq", "Acknowledged by peers", "State"], journals, "Replication per journal"),
    incidents.length
      ? table(["When", "Severity", "Incident", "Detail"], incidents, "Recent sync incidents")
      : h("p", { class: "empty" }, "No sync incidents (equivocation, changed keys). Rejected pushes are answered to the peer and logged."),
  );
}

export default {
  async mount(main) {
    root = main;
    fill(main, h("h2", {}, "Mesh"), h("div", { id: "mesh-body" }, "loading…"));
    await attempt("loading mesh", load);
    timer = setInterval(() => attempt("loading mesh", load), POLL_MS);
  },
  unmount() {
    clearInterval(timer);
    root = null;
  },
  refresh() {
    return attempt("loading mesh", load);
  },
};
