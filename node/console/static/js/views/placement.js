// A placed agent in the Agents view (docs/mesh.md, "What an operator sees and does"): where it
// runs and in which epoch, the home's lease (and "suspect" when it is gone or about to lapse),
// who stopped it, the revision its journal names, the nodes ready to take it (the only move
// targets), its moves and its deployments across homes. Everything here a peer wrote (node
// names, operators) goes through h(), which shows invisible characters as escapes.

import { h, can, table, when, inlineForm, visible } from "../ui.js";

const SUSPECT_TITLE = "its home no longer renews its lease: it may be down; a node of its set takes the agent over once the lease lapses";

/** Where it runs, for a list row or a status line: `node-b (epoch 1)`. */
export function runsOn(p) {
  return p ? `${p.home ?? "-"} (epoch ${p.epoch})` : "";
}

/** The "suspect" marker next to a home whose lease is gone or about to lapse. */
export function suspectMark(p) {
  return p?.suspect ? h("span", { class: "suspect", title: SUSPECT_TITLE }, "suspect") : null;
}

/** The lease as this node sees it: its own (on the home), else the home's record. */
export function leaseText(p) {
  if (p.lease) {
    const left = p.lease.expires_in != null ? `, ${p.lease.expires_in.toFixed(1)} s left` : "";
    return `held by ${p.lease.holder} (this node)${left}`;
  }
  if (p.home_lease) return `${p.home ?? "the home"}'s, ${p.home_lease.expires_in.toFixed(1)} s left${p.suspect ? ", about to lapse" : ""}`;
  return p.home ? `gone: ${p.home} renews it no more` : "none yet";
}

/** The state of a replica or a stopped placed agent, in words. */
export function placedState(d) {
  const p = d.placement;
  const by = p?.stopped_by ? ` (${p.stopped_by})` : "";
  const stopped = d.stopped ? `stopped by an operator${by}; tasks stay queued` : "";
  if (d.status !== "replica") return stopped;
  const where = `replica: runs on ${runsOn(p)}${p?.suspect ? ", suspect" : ""}`;
  return stopped ? `${where}; ${stopped}` : where;
}

/** What changes the panel (the lease's seconds are updated in place). */
export function placementKey(p) {
  if (!p) return "";
  return JSON.stringify([p.home, p.epoch, Boolean(p.lease), Boolean(p.home_lease), p.suspect, p.candidates, p.stopped_by, p.revision, p.moves.length, p.history.length]);
}

/** Keep the lease's seconds current without rebuilding the panel. */
export function refreshPlacement(panel, p) {
  const lease = panel.querySelector("#placement-lease-text");
  if (lease && p) lease.textContent = visible(leaseText(p));
}

/** The panel; `move(to)` moves the agent (offered on its home to an admin, candidates only). */
export function placementPanel(d, move) {
  const p = d.placement;
  if (!p) return null;
  const facts = [
    ["Runs on", "placement-home", [runsOn(p), " ", suspectMark(p)]],
    ["Lease", "placement-lease", h("span", { id: "placement-lease-text" }, leaseText(p))],
    ["Stopped by", "placement-stopped", p.stopped_by],
    // the revision its journal names is the one shown above, unless they drifted apart
    ["Journal's revision", "placement-revision", p.revision && p.revision !== d.current.revision ? `${p.revision} (its latest agent.placed)` : null],
    ["May run on", "placement-set", p.placement.join(", ")],
    ["Ready to take it", "placement-candidates", p.candidates.length ? p.candidates.join(", ") : "no other node of its set now"],
  ];
  const moves = p.moves.slice().reverse().map((m) =>
    h("tr", {}, h("td", {}, when(m.at)), h("td", {}, m.reason), h("td", {}, m.from ?? ""), h("td", {}, m.to ?? ""), h("td", {}, m.epoch), h("td", {}, m.seq)),
  );
  const deployments = p.history.slice().reverse().map((e) =>
    h("tr", {}, h("td", {}, when(e.at)), h("td", {}, e.change.replace("_", " ")), h("td", {}, e.revision), h("td", {}, e.node), h("td", { class: "mono" }, e.component), h("td", {}, e.operator ?? "")),
  );
  return h(
    "section",
    { class: "placement", id: "placement" },
    h("dl", { class: "facts" }, facts.filter(([, , value]) => value != null).flatMap(([label, id, value]) => [h("dt", {}, label), h("dd", { id }, value)])),
    p.lease && can("admin") ? moveForm(d, move) : null,
    moves.length ? table(["Time", "Move", "From", "To", "Epoch", "Seq"], moves, "Moves") : null,
    deployments.length ? table(["Time", "Change", "Revision", "Node", "Component", "By"], deployments, "Deployments across homes") : null,
  );
}

/** Move it to a node of its set that is ready to take it now (a fresh advert naming it): a
 * node that just died, or one without its component compiled, is not offered. */
function moveForm(d, move) {
  const targets = d.placement.candidates;
  if (!targets.length) {
    return h("p", { class: "hint", id: "move-none" }, "Move: no other node of its set is ready to take it now (none has a fresh advert naming it).");
  }
  const choice = h("select", { id: "move-target", "aria-label": `node to move ${d.name} to` }, targets.map((n) => h("option", { value: n }, n)));
  return inlineForm({ id: "move-form" }, () => move(choice.value), choice, h("button", { type: "submit", id: "move-button" }, "Move"));
}
