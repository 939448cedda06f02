// Usage: what each agent's inference used and cost, per model (GET /api/v1/usage).

import { api } from "../api.js";
import { h, attempt, table, fill, select } from "../ui.js";

const PERIODS = [["1h", "last hour"], ["1d", "last day"], ["7d", "last 7 days"], ["30d", "last 30 days"]];
let root = null;
let since = "30d";

async function load() {
  const report = await api(`/api/v1/usage?since=${encodeURIComponent(since)}`);
  const rows = [];
  for (const agent of report.agents) {
    for (const m of agent.models) {
      rows.push(
        h(
          "tr",
          { dataset: { agent: agent.agent, model: m.model } },
          h("td", {}, agent.agent),
          h("td", {}, m.model),
          h("td", { class: "num" }, String(m.calls)),
          h("td", { class: "num" }, String(m.errors + m.refused)),
          h("td", { class: "num" }, String(m.input_tokens)),
          h("td", { class: "num" }, String(m.output_tokens)),
          h("td", { class: "num" }, m.cost),
          h("td", { class: "num" }, `${m.mean_ms} ms`),
        ),
      );
    }
  }
  fill(
    root?.querySelector("#usage-list"),
    rows.length
      ? table(["Agent", "Model", "Calls", "Failed", "Input tokens", "Output tokens", "Cost", "Mean time"], rows)
      : h("p", { class: "empty" }, "No inference in this period."),
  );
}

function picker() {
  const changed = (value) => {
    since = value;
    attempt("loading usage", load);
  };
  return select("usage-since", "Period", PERIODS, changed, since);
}

export default {
  async mount(main) {
    root = main;
    fill(
      main,
      h("h2", {}, "Inference usage"),
      h("p", { class: "hint" }, "Tokens as the providers counted them; cost at the prices in [inference.models]."),
      picker(),
      h("div", { id: "usage-list" }, "loading…"),
    );
    await attempt("loading usage", load);
  },
  unmount() {
    root = null;
  },
  refresh() {
    return attempt("loading usage", load);
  },
  onEvent() {},
};
