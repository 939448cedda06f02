// Approvals inbox: pending requests live, grouped as /approvals/batched groups them, decided
// one by one, by selection or by group; and the history of decisions.

import { api } from "../api.js";
import { h, action, can, attempt, when, countdown, json, table, fill } from "../ui.js";

const HISTORY_SHOWN = 50;
const pending = new Map(); // id → request, in request order
const selected = new Set();
let history = [];
let root = null;
let focusedId = null;
// a request named by the address (#/inbox/<id>: the link in a notification), focused once shown
let linkedId = null;
let ticker = null;
let renderQueued = false;
let notice = "";
const reasons = new Map(); // id → the reason typed for denying it
const opened = new Set(); // ids whose full request is open
let batchReason = "";

// A request no running call waits for (its agent instance ended): what a decision on it does.
function orphaned(request) {
  if (request.state !== "orphaned") return [];
  const recorded = request.recorded ? ` · ${request.recorded} recorded by ${request.recorded_by || "?"}` : "";
  return [
    " · ",
    h("span", { class: "orphaned", title: request.note || "" }, `orphaned: ${request.note || "no call waits for it"}${recorded}`),
  ];
}

// A request a policy sent to people, or that needs several approvers: why, and how far it is
// ("1 of 2, waiting for finance").
function approvalsNeeded(request) {
  const parts = [];
  if (request.approvals) {
    parts.push(" · ", h("span", { class: "approvals", title: `approved by: ${request.approvals.approved_by.join(", ") || "nobody yet"}` }, request.approvals.progress));
  }
  if (request.policy?.reason) parts.push(" · ", h("span", { class: "policy-reason" }, `policy: ${request.policy.reason}`));
  return parts;
}

/** Who decided, as the history shows it: every approver when several were needed. */
function decidedBy(r) {
  if (r.approvers?.length) return r.approvers.join(", ");
  return r.operator || (r.outcome === "timeout" ? "(timed out)" : "");
}

function expiryOf(ts, timeoutSecs) {
  const start = new Date(ts).getTime();
  return Number.isNaN(start) ? ts : new Date(start + timeoutSecs * 1000).toISOString();
}

function add(request) {
  if (!pending.has(request.id)) pending.set(request.id, request);
}

function resolve(id, agent, outcome, at, operator, reason, approvers) {
  const request = pending.get(id);
  pending.delete(id);
  selected.delete(id);
  reasons.delete(id);
  opened.delete(id);
  if (history.some((r) => r.id === id)) return;
  history.unshift({
    id,
    agent: agent || request?.agent,
    outcome,
    at,
    operator,
    approvers: approvers || null,
    reason: reason || null,
    capability: request?.capability || "",
    detail: request?.detail || "",
  });
  history = history.slice(0, HISTORY_SHOWN);
}

/** The request's own fields, readably: a JSON object as a list of its fields (nested values
 * pretty-printed), anything else as the text it is. */
function requestFields(text) {
  let parsed;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed) || !Object.keys(parsed).length) {
    return h("pre", { class: "request-text" }, parsed === undefined ? text || "(empty)" : json(parsed));
  }
  return h(
    "dl",
    { class: "facts request-fields" },
    Object.entries(parsed).flatMap(([key, value]) => [
      h("dt", {}, key),
      h("dd", {}, value !== null && typeof value === "object" ? h("pre", {}, json(value)) : String(value)),
    ]),
  );
}

function aboutRequest(request) {
  const facts = [
    ["id", request.id],
    ["task", request.task],
    ["requested", request.requested_at],
    ["expires", request.expires_at],
    ["hash", request.request_hash],
  ].filter(([, value]) => value);
  return h(
    "dl",
    { class: "facts about" },
    facts.flatMap(([key, value]) => [h("dt", {}, key), h("dd", { class: "mono wrap" }, value)]),
  );
}

/** Groups by (agent, capability) in order of their first pending request. */
function groups() {
  const out = new Map();
  for (const request of pending.values()) {
    const key = `${request.agent}\u0000${request.capability}`;
    if (!out.has(key)) out.set(key, { agent: request.agent, capability: request.capability, ids: [] });
    out.get(key).ids.push(request.id);
  }
  return [...out.values()];
}

function updateBadge() {
  const badge = document.getElementById("inbox-count");
  if (badge) badge.textContent = pending.size ? String(pending.size) : "";
}

function scheduleRender() {
  updateBadge();
  if (renderQueued || !root) return;
  renderQueued = true;
  queueMicrotask(() => {
    renderQueued = false;
    render();
  });
}

/** The body of a decision: a denial carries the reason typed for it, if any. */
function decisionBody(decision, reason) {
  const text = (reason || "").trim();
  return decision === "deny" && text ? { decision, reason: text } : { decision };
}

/** Re-read how far the requests that need several approvers are (after an approval of one). */
async function refreshProgress() {
  const list = await api("/api/v1/approvals");
  for (const r of list) {
    const known = pending.get(r.id);
    if (known) Object.assign(known, { approvals: r.approvals, endorsements: r.endorsements });
  }
}

async function decide(ids, decision, reason) {
  await attempt(`${decision} failed`, async () => {
    if (ids.length === 1) {
      const body = decisionBody(decision, reason ?? reasons.get(ids[0]));
      const result = await api(`/api/v1/approvals/${encodeURIComponent(ids[0])}`, { method: "POST", body });
      if (result.applies === "waiting") {
        // one of several approvers: it stays pending until enough have approved
        const request = pending.get(result.id);
        if (request) request.approvals = result.approvals;
        notice = `Approval of ${result.id} counted: ${result.approvals.progress}`;
      } else {
        resolve(result.id, pending.get(result.id)?.agent, decision, result.decided_at, result.operator, result.reason, result.approvals?.approved_by);
        notice = `${decision === "approve" ? "Approved" : "Denied"} ${result.id}`;
      }
    } else {
      const body = { ids, ...decisionBody(decision, reason ?? batchReason) };
      const result = await api("/api/v1/approvals/batch", { method: "POST", body });
      const now = new Date().toISOString();
      for (const id of result.ids) resolve(id, pending.get(id)?.agent, decision, now, null, body.reason);
      if (body.reason) batchReason = "";
      const waiting = result.waiting?.length ? `, ${result.waiting.length} counted (they need more approvers)` : "";
      if (waiting) await refreshProgress();
      const skipped = result.skipped?.length ? `, ${result.skipped.length} skipped (already resolved, not hosted here, or approved by you already)` : "";
      notice = `${decision === "approve" ? "Approved" : "Denied"} ${result.decided}${waiting}${skipped}`;
    }
    scheduleRender();
  });
}

function requestRow(request) {
  const id = request.id;
  const detail = request.detail;
  const checkbox = can("operate")
    ? h("input", {
        type: "checkbox",
        "aria-label": `select ${id}`,
        checked: selected.has(id),
        onchange: (e) => {
          if (e.target.checked) selected.add(id);
          else selected.delete(id);
          scheduleRender();
        },
      })
    : null;
  return h(
    "li",
    {
      class: "request",
      tabindex: 0,
      dataset: { id, requestedAt: request.requested_at },
      "aria-label": `${request.agent} asks ${request.capability}: ${detail}`,
      onfocusin: () => {
        focusedId = id;
      },
    },
    checkbox,
    h(
      "div",
      { class: "what" },
      h("p", { class: "asked" }, detail || "(no description)"),
      h(
        "p",
        { class: "meta" },
        `${request.agent}${request.origin ? ` on ${request.origin}` : ""} · asked ${when(request.requested_at)} · `,
        h("span", { class: "countdown", dataset: { expires: request.expires_at } }, countdown(request.expires_at)),
        ...approvalsNeeded(request),
        ...orphaned(request),
      ),
      h(
        "details",
        {
          class: "full-request",
          open: opened.has(id), // stays open when new requests re-render the list
          ontoggle: (e) => (e.target.open ? opened.add(id) : opened.delete(id)),
        },
        h("summary", {}, "Full request"),
        requestFields(request.request ?? ""),
        aboutRequest(request),
      ),
    ),
    h(
      "div",
      { class: "actions" },
      action("operate", "Approve", () => decide([id], "approve"), { class: "approve", "aria-label": `approve ${id}` }),
      action("operate", "Deny", () => decide([id], "deny"), { class: "deny", "aria-label": `deny ${id}` }),
      can("operate")
        ? h("input", {
            class: "reason",
            type: "text",
            maxlength: 500,
            placeholder: "reason for denying (optional)",
            "aria-label": `reason for denying ${id}`,
            value: reasons.get(id) || "",
            oninput: (e) => reasons.set(id, e.target.value),
          })
        : null,
    ),
  );
}

function groupSection(group) {
  const label = `${group.agent} · ${group.capability}`;
  return h(
    "section",
    { class: "group", "aria-label": label, dataset: { agent: group.agent, capability: group.capability } },
    h(
      "header",
      {},
      h("h3", {}, label, " ", h("span", { class: "badge" }, String(group.ids.length))),
      h(
        "div",
        { class: "actions" },
        action("operate", "Approve group", () => decide(group.ids, "approve"), { "aria-label": `approve all of ${label}` }),
        action("operate", "Deny group", () => decide(group.ids, "deny"), { class: "deny", "aria-label": `deny all of ${label}` }),
      ),
    ),
    h("ul", { class: "requests" }, group.ids.map((id) => requestRow(pending.get(id)))),
  );
}

function historyTable() {
  const rows = history.map((r) =>
    h(
      "tr",
      { dataset: { id: r.id } },
      h("td", {}, when(r.at)),
      h("td", {}, r.agent || ""),
      h("td", {}, r.capability || ""),
      h("td", { class: "what" }, r.detail || ""),
      h("td", { class: `outcome ${r.outcome}` }, r.outcome),
      h("td", {}, decidedBy(r)),
      h("td", { class: "reason" }, r.reason || ""),
      h("td", { class: "mono" }, r.id),
    ),
  );
  const headers = ["When", "Agent", "Capability", "Request", "Outcome", "By", "Reason", "Id"];
  return table(headers, rows, "Decisions, newest first");
}

function render() {
  if (!root) return;
  const hadFocus = root.contains(document.activeElement);
  const list = groups();
  const chosen = [...selected].filter((id) => pending.has(id));
  const parts = [
    h("h2", {}, "Approvals inbox"),
    h("p", { class: "notice", role: "status" }, notice),
    can("operate") && pending.size
      ? h(
          "div",
          { class: "toolbar" },
          h("span", {}, `${chosen.length} selected`),
          h("button", { type: "button", disabled: !chosen.length, onclick: () => decide(chosen, "approve") }, "Approve selected"),
          h("button", { type: "button", class: "deny", disabled: !chosen.length, onclick: () => decide(chosen, "deny") }, "Deny selected"),
          h("input", {
            class: "reason",
            type: "text",
            maxlength: 500,
            placeholder: "reason for denying selected or a group (optional)",
            "aria-label": "reason for denying selected or a group",
            value: batchReason,
            oninput: (e) => {
              batchReason = e.target.value;
            },
          }),
        )
      : null,
    list.length
      ? h("div", { class: "groups" }, list.map(groupSection))
      : h("p", { class: "empty" }, "No pending approvals. New requests appear here as agents make them."),
    h("h2", {}, "History"),
    historyTable(),
  ];
  // a reason being typed keeps its focus and caret when new requests re-render the list
  const typing = root.contains(document.activeElement) && document.activeElement.matches("input.reason")
    ? { label: document.activeElement.getAttribute("aria-label"), caret: document.activeElement.selectionStart }
    : null;
  fill(root, parts);
  if (typing) {
    const input = root.querySelector(`input.reason[aria-label="${CSS.escape(typing.label)}"]`);
    input?.focus();
    input?.setSelectionRange(typing.caret, typing.caret);
  } else if (hadFocus && focusedId) root.querySelector(`li[data-id="${CSS.escape(focusedId)}"]`)?.focus();
  const linked = linkedId && root.querySelector(`li[data-id="${CSS.escape(linkedId)}"]`);
  if (linked) {
    linkedId = null;
    linked.focus();
    linked.scrollIntoView({ block: "center" });
  }
}

function rows() {
  return [...root.querySelectorAll("li.request")];
}

function move(step) {
  const all = rows();
  if (!all.length) return;
  const at = all.findIndex((el) => el.dataset.id === focusedId);
  const next = all[Math.min(all.length - 1, Math.max(0, at < 0 ? 0 : at + step))];
  next.focus();
}

export default {
  async start() {
    await this.refresh();
    clearInterval(ticker);
    ticker = setInterval(() => {
      if (!root) return;
      for (const el of root.querySelectorAll(".countdown")) el.textContent = countdown(el.dataset.expires);
    }, 1000);
  },

  stop() {
    clearInterval(ticker);
    pending.clear();
    selected.clear();
    reasons.clear();
    opened.clear();
    batchReason = "";
    history = [];
    root = null;
    updateBadge();
  },

  /** Re-read the pending list, its groups and the history (on sign-in and every reconnect). */
  async refresh() {
    await attempt("loading approvals", async () => {
      const [batched, list, past] = await Promise.all([
        api("/api/v1/approvals/batched"),
        api("/api/v1/approvals"),
        api(`/api/v1/approvals/history?limit=${HISTORY_SHOWN}`),
      ]);
      const byId = new Map(list.map((r) => [r.id, r]));
      pending.clear();
      for (const group of batched.groups) {
        for (const id of group.ids) if (byId.has(id)) add(byId.get(id));
      }
      for (const r of list) add(r); // any that arrived between the two reads
      history = past;
      scheduleRender();
    });
  },

  onEvent(name, data) {
    if (name === "approval_requested" && typeof data.id === "string") {
      const timeout = Number.isInteger(data.timeout_secs) && data.timeout_secs > 0 ? data.timeout_secs : 300;
      const { ts, timeout_secs: _t, ...rest } = data;
      add({ ...rest, requested_at: ts, timeout_secs: timeout, expires_at: expiryOf(ts, timeout) });
      scheduleRender();
      if (Array.isArray(data.approvers) && data.approvers.length) {
        // needs several approvers: how many and from which groups, in words, from the node
        attempt("loading approvals", async () => {
          await refreshProgress();
          scheduleRender();
        });
      }
    } else if (name === "approval_decided" && data.later && pending.has(data.id)) {
      // recorded for a later identical request: it stays pending, with the decision on it
      Object.assign(pending.get(data.id), {
        state: "orphaned",
        recorded: data.decision,
        recorded_by: data.operator,
        recorded_reason: data.reason,
      });
      scheduleRender();
    } else if (name === "approval_abandoned" && pending.has(data.id)) {
      resolve(data.id, data.agent, "abandoned", data.ts, null, data.reason);
      scheduleRender();
    } else if (name === "approval_decided" && pending.has(data.id)) {
      resolve(data.id, data.agent, data.decision, data.ts, data.operator, data.reason, data.approvers);
      scheduleRender();
    } else if (name === "approval_endorsed" && pending.has(data.id)) {
      // someone approved a request that needs several: how far it is now, from the node
      attempt("loading approvals", async () => {
        await refreshProgress();
        scheduleRender();
      });
    } else if (name === "approval_timed_out" && pending.has(data.id)) {
      resolve(data.id, data.agent, "timeout", data.ts, null);
      scheduleRender();
    }
  },

  async mount(main) {
    root = main;
    notice = "";
    const link = location.hash.match(/^#\/inbox\/(.+)$/);
    try {
      linkedId = link ? decodeURIComponent(link[1]) : null;
    } catch {
      linkedId = null; // not a link this node made
    }
    render();
  },

  unmount() {
    root = null;
  },

  onKey(event) {
    if (!root) return false;
    const key = event.key;
    if (key === "j") move(1);
    else if (key === "k") move(-1);
    else if (!can("operate")) return false;
    else if (key === "x" && focusedId && pending.has(focusedId)) {
      if (selected.has(focusedId)) selected.delete(focusedId);
      else selected.add(focusedId);
      scheduleRender();
    } else if ((key === "a" || key === "d") && focusedId && pending.has(focusedId)) {
      const id = focusedId;
      move(1);
      decide([id], key === "a" ? "approve" : "deny");
    } else if (key === "A" || key === "D") {
      const chosen = [...selected].filter((id) => pending.has(id));
      if (chosen.length) decide(chosen, key === "A" ? "approve" : "deny");
    } else return false;
    return true;
  },
};
