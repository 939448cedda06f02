// Logs and findings: the recent tail, then live lines from the stream, filtered by agent, level
// (at or above) and severity (at or above).

import { tail } from "../api.js";
import { h, attempt, when, select, fill } from "../ui.js";

const LEVELS = ["trace", "debug", "info", "warn", "error"];
const SEVERITIES = ["info", "low", "medium", "high", "critical"];
const KEEP = 1000;
const filters = { agent: "", level: "trace", severity: "info" };
let logs = [];
let findings = [];
let root = null;
let queued = false;

const rank = (list, value) => Math.max(0, list.indexOf(value));

/** A finding an operator's token posted, told apart from the agent's own. */
function postedBy(f) {
  return f.posted_by ? [h("span", { class: "posted-by", title: "posted over the API, not by the agent" }, `posted by ${f.posted_by}`), " "] : null;
}

function shown(entry, field, list, min) {
  return (!filters.agent || entry.agent === filters.agent) && rank(list, entry[field]) >= rank(list, min);
}

function schedule() {
  if (queued || !root) return;
  queued = true;
  queueMicrotask(() => {
    queued = false;
    render();
  });
}

function render() {
  if (!root) return;
  const agents = [...new Set([...logs, ...findings].map((e) => e.agent))].sort();
  const agentSelect = root.querySelector("#log-agent");
  if (agentSelect && agents.some((a) => !agentSelect.querySelector(`option[value="${CSS.escape(a)}"]`))) {
    const focused = document.activeElement === agentSelect;
    agentSelect.replaceChildren(...[["", "all agents"], ...agents.map((a) => [a, a])].map(([v, t]) => h("option", { value: v, selected: v === filters.agent }, t)));
    if (focused) agentSelect.focus();
  }
  const logLines = logs.filter((l) => shown(l, "level", LEVELS, filters.level)).slice(-300).reverse();
  fill(
    root.querySelector("#log-lines"),
    logLines.length ? [] : h("li", { class: "line empty" }, "No log entries match."),
    ...logLines.map((l) => h("li", { class: `line level-${l.level}` }, h("time", {}, when(l.ts)), " ", h("span", { class: "tag" }, l.level), " ", h("strong", {}, l.agent), " ", l.message)),
  );
  const found = findings.filter((f) => shown(f, "severity", SEVERITIES, filters.severity)).slice(-300).reverse();
  fill(
    root.querySelector("#finding-lines"),
    found.length ? [] : h("li", { class: "line empty" }, "No findings match."),
    ...found.map((f) => h("li", { class: `line severity-${f.severity}` }, h("time", {}, when(f.ts)), " ", h("span", { class: "tag" }, f.severity), " ", h("strong", {}, f.agent), " ", postedBy(f), h("b", {}, f.title), f.detail ? ` — ${f.detail}` : "")),
  );
}

async function load() {
  const [l, f] = await Promise.all([tail("/api/v1/logs", "logs", 200), tail("/api/v1/findings", "findings", 200)]);
  logs = l.entries;
  findings = f.entries;
  schedule();
}

export default {
  async mount(main) {
    root = main;
    fill(main, 
      h("h2", {}, "Logs and findings"),
      h(
        "div",
        { class: "toolbar" },
        select("log-agent", "Agent", [["", "all agents"]], (v) => {
          filters.agent = v;
          schedule();
        }),
        select("log-level", "Level at least", LEVELS, (v) => {
          filters.level = v;
          schedule();
        }, filters.level),
        select("finding-severity", "Severity at least", SEVERITIES, (v) => {
          filters.severity = v;
          schedule();
        }, filters.severity),
      ),
      h(
        "div",
        { class: "split" },
        h("section", { "aria-labelledby": "logs-title" }, h("h3", { id: "logs-title" }, "Logs (newest first)"), h("ol", { id: "log-lines", class: "tail", "aria-live": "off" })),
        h("section", { "aria-labelledby": "findings-title" }, h("h3", { id: "findings-title" }, "Findings (newest first)"), h("ol", { id: "finding-lines", class: "tail" })),
      ),
    );
    await attempt("loading logs", load);
  },
  unmount() {
    root = null;
  },
  refresh() {
    return attempt("loading logs", load);
  },
  onEvent(name, data) {
    if (name === "log") {
      logs.push({ ts: data.ts, level: String(data.level ?? "info"), agent: data.agent, message: String(data.message ?? "") });
      if (logs.length > KEEP) logs = logs.slice(-KEEP);
      schedule();
    } else if (name === "finding") {
      findings.push({ ts: data.ts, severity: String(data.severity ?? "info"), agent: data.agent, title: String(data.title ?? ""), detail: String(data.detail ?? ""), posted_by: typeof data.posted_by === "string" ? data.posted_by : null });
      if (findings.length > KEEP) findings = findings.slice(-KEEP);
      schedule();
    }
  },
};
