// Agents: status, uptime, heap, fuel, restarts and last activity, refreshed live; per agent its
// recent logs, findings, tasks and grants.

import { api, tail } from "../api.js";
import { h, attempt, duration, bytes, table, when, fill } from "../ui.js";

const POLL_MS = 2000;
const RECENT = 20;
let root = null;
let timer = null;
let chosen = null;
let statuses = [];

async function load() {
  statuses = await api("/api/v1/status");
  renderList();
}

function renderList() {
  const list = root?.querySelector("#agent-list");
  if (!list) return;
  const rows = statuses.map((s) =>
    h(
      "tr",
      { dataset: { agent: s.name }, class: s.name === chosen ? "chosen" : null },
      h("td", {}, h("button", { type: "button", class: "link", onclick: () => choose(s.name) }, s.name)),
      h("td", {}, h("span", { class: `status ${s.status}` }, s.status)),
      h("td", {}, duration(s.uptime_ms)),
      h("td", {}, bytes(s.memory_profile?.heap_bytes)),
      h("td", {}, s.memory_profile?.fuel_remaining ?? "unlimited"),
      h("td", {}, s.restart_count),
      h("td", {}, s.last_activity_ms_ago === null || s.last_activity_ms_ago === undefined ? "never" : `${duration(s.last_activity_ms_ago)} ago`),
    ),
  );
  fill(list, table(["Agent", "Status", "Uptime", "Heap", "Fuel left", "Restarts", "Last activity"], rows));
}

async function choose(name) {
  chosen = name;
  renderList();
  const panel = root.querySelector("#agent-detail");
  fill(panel, h("h3", {}, name), h("p", {}, "loading…"));
  await attempt(`loading ${name}`, async () => {
    const [logs, findings, tasks, grants] = await Promise.all([
      tail("/api/v1/logs", "logs", 500),
      tail("/api/v1/findings", "findings", 500),
      api(`/api/v1/a2a/tasks?agent=${encodeURIComponent(name)}`),
      api("/api/v1/broker/grants"),
    ]);
    const mine = (xs) => xs.filter((x) => x.agent === name).slice(-RECENT).reverse();
    fill(panel, 
      h("h3", {}, name),
      table(["Time", "Level", "Message"], mine(logs.entries).map((l) => h("tr", {}, h("td", {}, when(l.ts)), h("td", {}, l.level), h("td", {}, l.message))), "Recent logs"),
      table(["Time", "Severity", "Title", "Detail", "Posted by"], mine(findings.entries).map((f) => h("tr", {}, h("td", {}, when(f.ts)), h("td", {}, f.severity), h("td", {}, f.title), h("td", {}, f.detail), h("td", { class: "posted-by" }, f.posted_by || "(the agent)"))), "Recent findings"),
      table(["Task", "From", "Status", "Created"], tasks.slice(-RECENT).reverse().map((t) => h("tr", {}, h("td", { class: "mono" }, h("a", { href: `#/tasks/${encodeURIComponent(t.id)}` }, t.id)), h("td", {}, t.from), h("td", {}, t.status), h("td", {}, when(t.created_at)))), "Tasks"),
      table(["Domain", "Status", "Granted", "Revoked"], grants.filter((g) => g.agent === name).map((g) => h("tr", {}, h("td", {}, g.domain), h("td", {}, g.status), h("td", {}, when(g.granted_at)), h("td", {}, when(g.revoked_at)))), "Grants"),
    );
  });
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
        renderList();
      }
    }
  },
};
