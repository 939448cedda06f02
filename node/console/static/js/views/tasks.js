// Tasks: filter by status and agent, a task's detail with progress, output or error; cancel.

import { api, cancelTask } from "../api.js";
import { h, action, attempt, table, when, json, select, fill, inlineForm, field } from "../ui.js";

const STATUSES = ["", "pending", "running", "completed", "failed"];
const filters = { status: "", agent: "" };
let root = null;
let agents = [];
let refreshQueued = null;

function taskId() {
  const m = location.hash.match(/^#\/tasks\/(.+)$/);
  return m ? decodeURIComponent(m[1]) : null;
}

async function loadList() {
  const query = new URLSearchParams();
  if (filters.status) query.set("status", filters.status);
  if (filters.agent) query.set("agent", filters.agent);
  const tasks = await api(`/api/v1/a2a/tasks?${query}`);
  const rows = tasks
    .slice()
    .reverse()
    .map((t) =>
      h(
        "tr",
        { dataset: { id: t.id } },
        h("td", { class: "mono" }, h("a", { href: `#/tasks/${encodeURIComponent(t.id)}` }, t.id)),
        h("td", {}, t.from),
        h("td", {}, t.to),
        h("td", {}, h("span", { class: `status ${t.status}` }, t.status)),
        h("td", {}, when(t.created_at)),
        h("td", {}, when(t.completed_at)),
      ),
    );
  fill(root?.querySelector("#task-list"), 
      rows.length ? table(["Task", "From", "To", "Status", "Created", "Completed"], rows, "Newest first") : h("p", { class: "empty" }, "No tasks match."),
    );
}

async function loadDetail(id) {
  const panel = root?.querySelector("#task-detail");
  if (!panel) return;
  if (!id) {
    fill(panel, );
    return;
  }
  const t = await api(`/api/v1/a2a/tasks/${encodeURIComponent(id)}`);
  const open = t.status === "pending" || t.status === "running";
  fill(panel, 
    h("h3", {}, `Task ${t.id}`),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "From → to"),
      h("dd", {}, `${t.from} → ${t.to}`),
      h("dt", {}, "Status"),
      h("dd", {}, h("span", { class: `status ${t.status}` }, t.status)),
      h("dt", {}, "Created"),
      h("dd", {}, when(t.created_at)),
      t.completed_at ? [h("dt", {}, "Completed"), h("dd", {}, when(t.completed_at))] : null,
    ),
    h("h4", {}, "Input"),
    h("pre", {}, json(t.input)),
    t.progress !== undefined ? [h("h4", {}, "Progress"), h("pre", {}, json(t.progress))] : null,
    t.output ? [h("h4", {}, "Output"), h("pre", {}, json(t.output))] : null,
    t.error ? [h("h4", {}, "Error"), h("pre", { class: "error" }, t.error)] : null,
    open
      ? action("operate", "Cancel task", () =>
          attempt("cancel failed", async () => {
            await cancelTask(t.to, t.id);
            await Promise.all([loadDetail(t.id), loadList()]);
          }),
        )
      : null,
  );
}

function createForm() {
  if (!action("operate", "x", () => {})) return null;
  const names = agents.map((a) => a.name);
  return inlineForm(
    {},
    (form) => {
      attempt("create failed", async () => {
        let input;
        try {
          input = JSON.parse(form.input.value || "{}");
        } catch (err) {
          throw new Error(`input is not JSON: ${err.message}`);
        }
        const created = await api("/api/v1/a2a/tasks", {
          method: "POST",
          body: { from: form.from.value, to: form.to.value, input },
        });
        location.hash = `#/tasks/${encodeURIComponent(created.id)}`;
      });
    },
    h("h3", {}, "New task"),
    field("From", h("input", { id: "task-from", name: "from", value: "operator", required: true })),
    field("To", h("select", { id: "task-to", name: "to" }, names.map((n) => h("option", { value: n }, n)))),
    field("Input (JSON object)", h("textarea", { id: "task-input", name: "input", rows: 2 }, '{"numbers": [1, 2, 3]}'), true),
    h("button", { type: "submit" }, "Create task"),
  );
}

function scheduleRefresh() {
  clearTimeout(refreshQueued);
  refreshQueued = setTimeout(() => {
    attempt("refreshing tasks", () => Promise.all([loadList(), loadDetail(taskId())]));
  }, 100);
}

export default {
  async mount(main) {
    root = main;
    agents = await api("/api/v1/status").catch(() => []);
    const agentOptions = [["", "all agents"], ...agents.map((a) => a.name)];
    fill(main, 
      h("h2", {}, "Tasks"),
      h(
        "div",
        { class: "toolbar" },
        select("task-status", "Status", STATUSES.map((s) => [s, s || "all statuses"]), (v) => {
          filters.status = v;
          scheduleRefresh();
        }, filters.status),
        select("task-agent", "Agent", agentOptions, (v) => {
          filters.agent = v;
          scheduleRefresh();
        }, filters.agent),
      ),
      h("div", { class: "split" }, h("div", { id: "task-list" }, "loading…"), h("section", { id: "task-detail", class: "detail", "aria-live": "polite" })),
      createForm(),
    );
    await attempt("loading tasks", () => Promise.all([loadList(), loadDetail(taskId())]));
  },
  unmount() {
    clearTimeout(refreshQueued);
    root = null;
  },
  refresh: scheduleRefresh,
  onEvent(name) {
    if (name.startsWith("task_")) scheduleRefresh();
  },
};
