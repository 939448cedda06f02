// Grants: which agent may read which secret domain; revoke and restore.

import { api } from "../api.js";
import { h, action, attempt, table, when, fill } from "../ui.js";

let root = null;

async function change(grant, verb) {
  await attempt(`${verb} failed`, async () => {
    await api(`/api/v1/broker/grants/${encodeURIComponent(grant.agent)}/${encodeURIComponent(grant.domain)}/${verb}`, { method: "POST" });
    await load();
  });
}

async function load() {
  const grants = await api("/api/v1/broker/grants");
  const rows = grants.map((g) =>
    h(
      "tr",
      { dataset: { agent: g.agent, domain: g.domain } },
      h("td", {}, g.agent),
      h("td", {}, g.domain),
      h("td", {}, h("span", { class: `status ${g.status}` }, g.status)),
      h("td", {}, when(g.granted_at)),
      h("td", {}, when(g.revoked_at)),
      h(
        "td",
        {},
        g.status === "active"
          ? action("operate", "Revoke", () => change(g, "revoke"), { class: "deny", "aria-label": `revoke ${g.domain} from ${g.agent}` })
          : action("operate", "Restore", () => change(g, "restore"), { "aria-label": `restore ${g.domain} to ${g.agent}` }),
      ),
    ),
  );
  fill(root?.querySelector("#grant-list"), 
    rows.length ? table(["Agent", "Domain", "Status", "Granted", "Revoked", ""], rows) : h("p", { class: "empty" }, "No grants."),
  );
}

export default {
  async mount(main) {
    root = main;
    fill(main, 
      h("h2", {}, "Secrets-broker grants"),
      h("p", { class: "hint" }, "Revoking takes effect at once: the agent's next read of that domain is refused."),
      h("div", { id: "grant-list" }, "loading…"),
    );
    await attempt("loading grants", load);
  },
  unmount() {
    root = null;
  },
  refresh() {
    return attempt("loading grants", load);
  },
  onEvent(name) {
    if (name.startsWith("grant_")) attempt("loading grants", load);
  },
};
