// Registry: packages and their versions; publish a component (publish scope).

import { api } from "../api.js";
import { h, can, attempt, table, when, bytes, fill, visible, inlineForm, field } from "../ui.js";

let root = null;

async function showVersions(id) {
  const panel = root?.querySelector("#package-detail");
  await attempt(`loading ${id}`, async () => {
    const p = await api(`/api/v1/registry/packages/${encodeURIComponent(id)}`);
    fill(panel, 
      h("h3", {}, p.id),
      h("p", {}, p.description || ""),
      h("p", {}, `Latest ${p.version}, ${bytes(p.wasm_size_bytes)}, ${p.checksum}`),
      h("ul", {}, p.versions.map((v) => h("li", {}, v))),
    );
  });
}

async function load() {
  const packages = await api("/api/v1/registry/packages");
  const rows = packages.map((p) =>
    h(
      "tr",
      {},
      h("td", {}, h("button", { type: "button", class: "link", onclick: () => showVersions(p.id) }, p.id)),
      h("td", {}, p.version),
      h("td", {}, p.description),
      h("td", {}, bytes(p.wasm_size_bytes)),
      h("td", {}, when(p.published_at)),
      h("td", { class: "mono wrap" }, p.checksum),
    ),
  );
  fill(root?.querySelector("#package-list"), 
    rows.length ? table(["Package", "Latest", "Description", "Size", "Published", "Checksum"], rows) : h("p", { class: "empty" }, "No packages published."),
  );
}

function publishForm() {
  if (!can("publish")) return null;
  return inlineForm(
    {},
    (form) => {
      const status = form.querySelector("#publish-result");
      const button = form.querySelector("button[type=submit]");
      button.disabled = true;
      status.textContent = "Publishing… (the node validates the component first)";
      attempt("publish failed", async () => {
        try {
          const result = await api("/api/v1/registry/packages", { method: "POST", form: new FormData(form) });
          form.reset();
          status.textContent = visible(`Published ${result.id} ${result.version} (${result.checksum})`);
          await load();
        } catch (err) {
          status.textContent = "";
          throw err;
        } finally {
          button.disabled = false;
        }
      });
    },
    h("h3", {}, "Publish a component"),
    field("Package id", h("input", { id: "pkg-id", name: "id", required: true })),
    field("Version (SemVer)", h("input", { id: "pkg-version", name: "version", required: true, placeholder: "1.0.0" })),
    field("Description", h("input", { id: "pkg-description", name: "description" }), true),
    field("Component (.wasm)", h("input", { id: "pkg-wasm", name: "wasm", type: "file", accept: ".wasm,application/wasm", required: true })),
    h("button", { type: "submit" }, "Publish"),
    h("p", { id: "publish-result", role: "status" }),
  );
}

export default {
  async mount(main) {
    root = main;
    fill(main, 
      h("h2", {}, "Registry"),
      h("div", { class: "split" }, h("div", { id: "package-list" }, "loading…"), h("section", { id: "package-detail", class: "detail", "aria-live": "polite" })),
      publishForm(),
    );
    await attempt("loading packages", load);
  },
  unmount() {
    root = null;
  },
  refresh() {
    return attempt("loading packages", load);
  },
  onEvent(name) {
    if (name === "package_published") attempt("loading packages", load);
  },
};
