// Agents: status, uptime, heap, fuel, restarts and last activity, refreshed live; per agent its
// deployment (revision, version, source, history; stop/start/upgrade/roll back/remove for an
// admin token), where a placed agent runs (placement.js) and its recent logs, findings, tasks
// and grants. The list is GET /api/v1/status's agents and GET /api/v1/agents' others: the
// placed agents this node holds a replica of, which have no instance here.

import { api, tail } from "../api.js";
import { h, attempt, action, can, duration, bytes, table, when, fill, visible, inlineForm } from "../ui.js";
import { placementPanel, placementKey, placedState, refreshPlacement, runsOn, suspectMark } from "./placement.js";

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

/** What changes the deployment panel: a new rollout state or history entry, a move. */
function rolloutKey(d) {
  return `${d.current.revision}:${d.rollout?.revision ?? ""}:${d.rollout?.state ?? ""}:${d.history.length}:${d.stopped}:${d.status === "replica"}:${placementKey(d.placement)}`;
}

/** Keep the chosen agent's rollout live: its probation's progress, and the panel afresh once
 * the rollout passed or was rolled back (the history then has the automatic rollback). */
function refreshRollout() {
  const panel = root?.querySelector("#deployment");
  const d = chosen ? deployments[chosen] : null;
  if (!panel || !d || panel.dataset.agent !== d.name) return;
  if (panel.dataset.rollout !== rolloutKey(d)) {
    // the answer to the operator's last action stays in view across the panel's renewal
    const said = panel.querySelector("#deploy-note")?.textContent;
    const fresh = deploymentPanel(d);
    panel.replaceWith(fresh);
    const note = fresh.querySelector("#deploy-note");
    if (note && said) note.textContent = said;
    return;
  }
  // what agents and peers wrote (reasons) shown as the first render shows it: escaped
  const line = panel.querySelector("#deploy-rollout");
  if (line) line.textContent = visible(rolloutText(d.rollout));
  const state = panel.querySelector("#deploy-state");
  if (state) state.textContent = visible(stateText(d));
  refreshPlacement(panel, d.placement);
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
  if (d.placement && (d.stopped || d.status === "replica")) return placedState(d);
  if (d.stopped) return "stopped by an operator (tasks stay queued)";
  const change = d.change ? ` — ${d.change.action}: waiting for ${d.change.step}` : "";
  return `${d.status}${d.phase ? ` (${d.phase}${d.reason ? `: ${d.reason}` : ""})` : ""}${change}`;
}

function versionOf(d) {
  if (!d) return "";
  return `r${d.current.revision}${d.current.version ? ` · ${d.current.version}` : ""}`;
}

/** A row for an agent the runtime has no instance of here: a replica (a placed agent another
 * node runs), or one being deployed; what GET /api/v1/agents says of it. */
function rowOf(d) {
  const replica = d.status === "replica";
  const phase = replica ? (d.stopped ? "stopped by an operator" : null) : d.phase;
  return { name: d.name, status: d.status, phase, reason: replica ? null : d.reason };
}

/** The runtime's agents (a deployed agent that moved away reads as the replica it is now),
 * then the others GET /api/v1/agents lists. */
function listed() {
  const rows = statuses.map((s) => (deployments[s.name]?.status === "replica" ? rowOf(deployments[s.name]) : s));
  const known = new Set(statuses.map((s) => s.name));
  const others = Object.values(deployments).filter((d) => !known.has(d.name)).sort((a, b) => a.name.localeCompare(b.name));
  return rows.concat(others.map(rowOf));
}

/** Uptime, heap, fuel left, restarts, last activity: of an instance here ("–" without one). */
function figures(s) {
  if (!s.memory_profile) return ["–", "–", "–", "–", "–"];
  const idle = s.last_activity_ms_ago;
  return [duration(s.uptime_ms), bytes(s.memory_profile.heap_bytes), s.memory_profile.fuel_remaining ?? "unlimited", s.restart_count, idle === null || idle === undefined ? "never" : `${duration(idle)} ago`];
}

function renderList() {
  const list = root?.querySelector("#agent-list");
  if (!list) return;
  const rows = listed().map((s) => {
    const placement = deployments[s.name]?.placement;
    return h(
      "tr",
      { dataset: { agent: s.name }, class: s.name === chosen ? "chosen" : null },
      h("td", {}, h("button", { type: "button", class: "link", onclick: () => choose(s.name) }, s.name)),
      h("td", {}, h("span", { class: `status ${s.status}`, title: s.reason ?? "" }, s.status), s.phase ? h("span", { class: "phase", title: s.reason ?? "" }, ` ${s.phase}`) : null, s.reason ? h("div", { class: "hint phase-reason" }, s.reason) : null),
      h("td", { class: "runs-on" }, runsOn(placement), " ", suspectMark(placement)),
      h("td", {}, versionOf(deployments[s.name])),
      h("td", {}, deployments[s.name]?.source ?? ""),
      figures(s).map((figure) => h("td", {}, figure)),
    );
  });
  fill(list, table(["Agent", "Status", "Runs on", "Version", "Source", "Uptime", "Heap", "Fuel left", "Restarts", "Last activity"], rows));
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
  // a replica is changed on its home (this node would answer 409 naming it)
  const replica = d.status === "replica";
  const api_ = d.source === "api" && !replica;
  const upgradeInput = h("input", { id: "upgrade-component", type: "text", placeholder: "registry:ID@VERSION", "aria-label": "component to upgrade to", value: d.current.component.startsWith("registry:") ? d.current.component : "" });
  const buttons = h(
    "div",
    { class: "actions", id: "deploy-actions" },
    replica
      ? h("p", { class: "hint", id: "replica-hint" }, `A replica: to stop, start, upgrade, roll back, remove or move it, ask its home, ${d.placement?.home ?? "the node that runs it"}.`)
      : d.stopped
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
    placementPanel(d, (to) => lifecycle(d.name, `moving to ${to}`, `${base}/move`, { method: "POST", body: { to } })),
    h("p", { id: "deploy-note", role: "status" }),
    history.length || !d.placement ? table(["Time", "Event", "Revision", "Component", "By", "Reason"], history, d.placement ? "Deployment history on this node" : "Deployment history") : null,
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
