// Agents: status, uptime, heap, fuel, restarts and last activity, refreshed live; per agent its
// deployment (revision, version, source, history; stop/start/upgrade/roll back/remove for an
// admin token) and its recent logs, findings, tasks and grants.

import { api, tail } from "../api.js";
import { h, attempt, action, can, duration, bytes, table, when, fill, visible, inlineForm } from "../ui.js";

const POLL_MS = 2000;
const RECENT = 20;
let root = null;
let timer = null;
let chosen = null;
let statuses = [];
let deployments = {};

async function load() {
  const [status, deployed] = await Promise.all([api("/api/v1/status"), api("/api/v1/agents")]);
  statuses = status;
  deployments = Object.fromEntries(deployed.map((d) => [d.name, d]));
  renderList();
  refreshRollout();
}

/** What changes the deployment panel: a new rollout state or a new history entry. */
function rolloutKey(d) {
  return `${d.current.revision}:${d.rollout?.revision ?? ""}:${d.rollout?.state ?? ""}:${d.history.length}:${d.stopped}`;
}

/** Keep the chosen agent's rollout live: its probation's progress, and the panel afresh once
 * the rollout passed or was rolled back (the history then has the automatic rollback). */
function refreshRollout() {
  const panel = root?.querySelector("#deployment");
  const d = chosen ? deployments[chosen] : null;
  if (!panel || !d || panel.dataset.agent !== d.name) return;
  if (panel.dataset.rollout !== rolloutKey(d)) {
    panel.replaceWith(deploymentPanel(d));
    return;
  }
  // what agents and peers wrote (reasons) shown as the first render shows it: escaped
  const line = panel.querySelector("#deploy-rollout");
  if (line) line.textContent = visible(rolloutText(d.rollout));
  const state = panel.querySelector("#deploy-state");
  if (state) state.textContent = visible(stateText(d));
}

function rolloutText(r) {
  if (!r) return "";
  const reason = r.reason ? `: ${r.reason}` : "";
  switch (r.state) {
    case "probation":
      return `revision ${r.revision} on probation: ${r.good_runs}/${r.ticks_needed} good runs, ${r.faults} fault(s) (at most ${r.max_faults}), ${Math.round(r.seconds)} of ${r.window_secs} s`;
    case "rolling_back":
      return `revision ${r.revision} failed its probation; rolling back${reason}`;
    case "rolled_back":
      return `rolled back automatically: revision ${r.revision} failed its probation (${r.reason}); now revision ${r.rolled_back_to}`;
    case "passed":
      return `revision ${r.revision} passed its probation (${r.good_runs} good runs)`;
    default:
      return `probation of revision ${r.revision}: ${r.state}${reason}`;
  }
}

function stateText(d) {
  if (d.stopped) return "stopped by an operator (tasks stay queued)";
  const change = d.change ? ` — ${d.change.action}: waiting for ${d.change.step}` : "";
  return `${d.status}${d.phase ? ` (${d.phase}${d.reason ? `: ${d.reason}` : ""})` : ""}${change}`;
}

function versionOf(d) {
  if (!d) return "";
  return `r${d.current.revision}${d.current.version ? ` · ${d.current.version}` : ""}`;
}

function renderList() {
  const list = root?.querySelector("#agent-list");
  if (!list) return;
  const rows = statuses.map((s) =>
    h(
      "tr",
      { dataset: { agent: s.name }, class: s.name === chosen ? "chosen" : null },
      h("td", {}, h("button", { type: "button", class: "link", onclick: () => choose(s.name) }, s.name)),
      h("td", {}, h("span", { class: `status ${s.status}`, title: s.reason ?? "" }, s.status), s.phase ? h("span", { class: "phase", title: s.reason ?? "" }, ` ${s.phase}`) : null, s.reason ? h("div", { class: "hint phase-reason" }, s.reason) : null),
      h("td", {}, versionOf(deployments[s.name])),
      h("td", {}, deployments[s.name]?.source ?? ""),
      h("td", {}, duration(s.uptime_ms)),
      h("td", {}, bytes(s.memory_profile?.heap_bytes)),
      h("td", {}, s.memory_profile?.fuel_remaining ?? "unlimited"),
      h("td", {}, s.restart_count),
      h("td", {}, s.last_activity_ms_ago === null || s.last_activity_ms_ago === undefined ? "never" : `${duration(s.last_activity_ms_ago)} ago`),
    ),
  );
  fill(list, table(["Agent", "Status", "Version", "Source", "Uptime", "Heap", "Fuel left", "Restarts", "Last activity"], rows));
}

async function choose(name) {
  chosen = name;
  renderList();
  const panel = root.querySelector("#agent-detail");
  fill(panel, h("h3", {}, name), h("p", {}, "loading…"));
  await attempt(`loading ${name}`, async () => {
    const [deployment, logs, findings, tasks, grants] = await Promise.all([
      api(`/api/v1/agents/${encodeURIComponent(name)}`).catch(() => null),
      tail("/api/v1/logs", "logs", 500),
      tail("/api/v1/findings", "findings", 500),
      api(`/api/v1/a2a/tasks?agent=${encodeURIComponent(name)}`),
      api("/api/v1/broker/grants"),
    ]);
    const mine = (xs) => xs.filter((x) => x.agent === name).slice(-RECENT).reverse();
    fill(panel, 
      h("h3", {}, name),
      deploymentPanel(deployment),
      table(["Time", "Level", "Message"], mine(logs.entries).map((l) => h("tr", {}, h("td", {}, when(l.ts)), h("td", {}, l.level), h("td", {}, l.message))), "Recent logs"),
      table(["Time", "Severity", "Title", "Detail", "Posted by"], mine(findings.entries).map((f) => h("tr", {}, h("td", {}, when(f.ts)), h("td", {}, f.severity), h("td", {}, f.title), h("td", {}, f.detail), h("td", { class: "posted-by" }, f.posted_by || "(the agent)"))), "Recent findings"),
      table(["Task", "From", "Status", "Created"], tasks.slice(-RECENT).reverse().map((t) => h("tr", {}, h("td", { class: "mono" }, h("a", { href: `#/tasks/${encodeURIComponent(t.id)}` }, t.id)), h("td", {}, t.from), h("td", {}, t.status), h("td", {}, when(t.created_at)))), "Tasks"),
      table(["Domain", "Status", "Granted", "Revoked"], grants.filter((g) => g.agent === name).map((g) => h("tr", {}, h("td", {}, g.domain), h("td", {}, g.status), h("td", {}, when(g.granted_at)), h("td", {}, when(g.revoked_at)))), "Grants"),
    );
  });
}

/** Run a lifecycle call, then show the agent afresh; the node's answer (`message`, or the
 * problem's detail: a rolled-back upgrade says why) goes to the status line. */
async function lifecycle(name, label, path, init) {
  const note = root?.querySelector("#deploy-note");
  if (note) note.textContent = visible(`${label}…`);
  let message = null;
  await attempt(`${label} ${name}`, async () => {
    message = (await api(path, init)).message;
  });
  // afresh either way: a refused upgrade was rolled back, which the history shows
  await attempt("refreshing agents", load);
  if (!root) return;
  await choose(name);
  const fresh = root?.querySelector("#deploy-note");
  if (fresh && message) fresh.textContent = visible(message);
}

function deploymentPanel(d) {
  if (!d) return h("p", { class: "hint" }, "No deployment record.");
  const base = `/api/v1/agents/${encodeURIComponent(d.name)}`;
  const api_ = d.source === "api";
  const upgradeInput = h("input", { id: "upgrade-component", type: "text", placeholder: "registry:ID@VERSION", "aria-label": "component to upgrade to", value: d.current.component.startsWith("registry:") ? d.current.component : "" });
  const buttons = h(
    "div",
    { class: "actions", id: "deploy-actions" },
    d.stopped
      ? action("admin", "Start", () => lifecycle(d.name, "starting", `${base}/start`, { method: "POST" }), { "aria-label": `start ${d.name}` })
      : action("admin", "Stop", () => lifecycle(d.name, "stopping", `${base}/stop`, { method: "POST" }), { class: "deny", "aria-label": `stop ${d.name}` }),
    api_ && d.previous.length
      ? action("admin", `Roll back to r${d.previous[d.previous.length - 1].revision}`, () => lifecycle(d.name, "rolling back", `${base}/rollback`, { method: "POST" }), { "aria-label": `roll back ${d.name}` })
      : null,
    api_
      ? action("admin", "Remove", () => {
          if (window.confirm(`Remove ${d.name}? Its journal is kept.`)) lifecycle(d.name, "removing", base, { method: "DELETE" });
        }, { class: "deny", "aria-label": `remove ${d.name}` })
      : null,
  );
  const upgrade =
    api_ && can("admin")
      ? inlineForm(
          { id: "upgrade-form" },
          () => {
            // the current definition with the new component: permissions and limits stay
            const { limits, sha256: _sha, ...rest } = d.definition;
            lifecycle(d.name, "upgrading", base, { method: "PUT", body: { ...rest, ...limits, component: upgradeInput.value.trim() } });
          },
          upgradeInput,
          h("button", { type: "submit" }, "Upgrade"),
        )
      : null;
  const last = d.history[d.history.length - 1];
  const automatic =
    last && last.event === "rolled_back" && last.automatic
      ? h("p", { class: "notice automatic-rollback", id: "automatic-rollback", role: "status" }, `Rolled back automatically ${when(last.at)} to revision ${last.revision}: ${last.reason ?? "no reason given"}`)
      : null;
  const history = d.history.slice().reverse().map((e) =>
    h("tr", {}, h("td", {}, when(e.at)), h("td", {}, e.event.replace("_", " ") + (e.automatic ? " (automatic)" : "")), h("td", {}, e.revision ?? ""), h("td", { class: "mono" }, e.component ?? ""), h("td", {}, e.operator ?? ""), h("td", {}, e.reason ?? "")),
  );
  return h(
    "section",
    { class: "deployment", id: "deployment", dataset: { agent: d.name, rollout: rolloutKey(d) } },
    automatic,
    h("dl", { class: "facts" },
      h("dt", {}, "Source"), h("dd", {}, d.source === "config" ? "runtime.toml" : "deployed through the API"),
      h("dt", {}, "Revision"), h("dd", { id: "deploy-revision" }, `${d.current.revision}${d.current.version ? ` (version ${d.current.version})` : ""}`),
      h("dt", {}, "Component"), h("dd", { class: "mono" }, d.current.component),
      h("dt", {}, "Checksum"), h("dd", { class: "mono checksum" }, d.current.sha256 || "unknown"),
      h("dt", {}, "State"), h("dd", { id: "deploy-state" }, stateText(d)),
      d.rollout ? h("dt", {}, "Rollout") : null,
      d.rollout ? h("dd", { id: "deploy-rollout", class: d.rollout.state === "rolled_back" ? "automatic-rollback" : null }, rolloutText(d.rollout)) : null,
    ),
    buttons,
    upgrade,
    placementPanel(d),
    h("p", { id: "deploy-note", role: "status" }),
    table(["Time", "Event", "Revision", "Component", "By", "Reason"], history, "Deployment history"),
  );
}

/** A placed agent (docs/mesh.md, "Placement and failover"): where it runs, its lease and its
 * moves; on its home, a form to move it to another node of its placement set. */
function placementPanel(d) {
  const p = d.placement;
  if (!p) return null;
  const lease = p.lease ? `held by ${p.lease.holder}${p.lease.expires_in != null ? `, ${p.lease.expires_in.toFixed(1)} s left` : ""}` : "held by the home, not this node";
  const targets = p.placement.filter((n) => n !== p.home);
  const choice = h("select", { id: "move-target", "aria-label": `node to move ${d.name} to` }, ...targets.map((n) => h("option", { value: n }, n)));
  const base = `/api/v1/agents/${encodeURIComponent(d.name)}`;
  const form =
    p.lease && targets.length && can("admin")
      ? inlineForm(
          { id: "move-form" },
          () => lifecycle(d.name, `moving to ${choice.value}`, `${base}/move`, { method: "POST", body: { to: choice.value } }),
          choice,
          h("button", { type: "submit", id: "move-button" }, "Move"),
        )
      : null;
  const moves = (p.moves || []).slice().reverse().map((m) =>
    h("tr", {}, h("td", {}, when(m.at)), h("td", {}, m.reason), h("td", {}, m.from ?? ""), h("td", {}, m.to ?? ""), h("td", {}, m.epoch), h("td", {}, m.seq)),
  );
  return h(
    "section",
    { class: "placement", id: "placement" },
    h("dl", { class: "facts" },
      h("dt", {}, "Runs on"), h("dd", { id: "placement-home" }, `${p.home ?? "-"} (epoch ${p.epoch})`),
      h("dt", {}, "Lease"), h("dd", { id: "placement-lease" }, lease),
      h("dt", {}, "May run on"), h("dd", { id: "placement-set" }, p.placement.join(", ")),
    ),
    form,
    moves.length ? table(["Time", "Move", "From", "To", "Epoch", "Seq"], moves, "Moves") : null,
  );
}

export default {
  async mount(main) {
    root = main;
    fill(main, 
      h("h2", {}, "Agents"),
      h("div", { id: "agent-list" }, "loading…"),
      h("section", { id: "agent-detail", class: "detail", "aria-live": "polite" }, h("p", { class: "hint" }, "Choose an agent to see its recent logs, findings, tasks and grants.")),
    );
    await attempt("loading agents", load);
    timer = setInterval(() => attempt("refreshing agents", load), POLL_MS);
    if (chosen) await choose(chosen);
  },
  unmount() {
    clearInterval(timer);
    root = null;
  },
  refresh() {
    return attempt("refreshing agents", load);
  },
  onEvent(name, data) {
    if (name === "agent_status") {
      const s = statuses.find((x) => x.name === data.agent);
      if (s) {
        s.status = data.status;
        if (data.status === "idle" || data.status === "running") s.phase = s.reason = null; // a live instance
        renderList();
      }
    }
  },
};
