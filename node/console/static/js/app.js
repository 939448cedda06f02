// The console shell: sign-in, navigation, the shared live stream, keyboard shortcuts.

import { api, token, ApiError } from "./api.js";
import { LiveStream } from "./sse.js";
import { session, showError, clearError, visible } from "./ui.js";
import inbox from "./views/inbox.js";
import agents from "./views/agents.js";
import tasks from "./views/tasks.js";
import logs from "./views/logs.js";
import grants from "./views/grants.js";
import mesh from "./views/mesh.js";
import registry from "./views/registry.js";
import usage from "./views/usage.js";

const VIEWS = { inbox, agents, tasks, logs, grants, mesh, registry, usage };
const ORDER = Object.keys(VIEWS);
const $ = (id) => document.getElementById(id);

let stream = null;
let current = null;

async function signIn(value) {
  token.set(value);
  let me;
  try {
    me = await api("/api/v1/auth/whoami");
  } catch (err) {
    token.clear();
    throw err;
  }
  session.name = me.name;
  session.scopes = me.scopes;
  const health = await api("/.well-known/agent-card.json").catch(() => null);
  $("node-name").textContent = health?.name ? visible(`· ${health.name}`) : "";
  $("whoami").textContent = visible(`${me.name} (${me.scopes.join(", ")})`);
  $("signin").hidden = true;
  $("app").hidden = false;
  startStream();
  await inbox.start();
  await route();
}

function signOut(message = "") {
  stream?.stop();
  stream = null;
  current?.unmount?.();
  current = null;
  inbox.stop();
  token.clear();
  session.name = "";
  session.scopes = [];
  $("app").hidden = true;
  $("signin").hidden = false;
  $("signin-error").textContent = visible(message);
  $("token").value = "";
  $("token").focus();
}

function startStream() {
  stream = new LiveStream("/api/v1/events", {
    onState(state) {
      const el = $("stream-state");
      el.textContent = state === "live" ? "live" : `${state}…`;
      el.dataset.state = state;
    },
    onOpen(resumed) {
      // a resumed stream replays what was missed; re-reading the views also covers a restart
      inbox.refresh();
      if (resumed) current?.refresh?.();
    },
    onEvent(name, data, id) {
      inbox.onEvent(name, data, id);
      if (current !== inbox) current?.onEvent?.(name, data, id);
    },
    onFatal(err) {
      signOut(err.message);
    },
  });
  stream.start();
}

async function route() {
  const name = (location.hash.match(/^#\/(\w+)/) || [])[1];
  const view = VIEWS[name] || inbox;
  if (!VIEWS[name]) history.replaceState(null, "", "#/inbox");
  current?.unmount?.();
  current = view;
  clearError();
  for (const link of document.querySelectorAll("nav a")) {
    if (link.dataset.view === (VIEWS[name] ? name : "inbox")) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const main = $("main");
  main.replaceChildren();
  try {
    await view.mount(main);
  } catch (err) {
    showError(err);
  }
}

function onKey(event) {
  if ($("app").hidden || event.ctrlKey || event.metaKey || event.altKey) return;
  const target = event.target;
  if (target.closest("input, textarea, select, [contenteditable]")) return;
  if (event.key === "?") {
    $("help").showModal();
    event.preventDefault();
    return;
  }
  const index = Number(event.key) - 1;
  if (Number.isInteger(index) && index >= 0 && index < ORDER.length) {
    location.hash = `#/${ORDER[index]}`;
    event.preventDefault();
    return;
  }
  if (current?.onKey?.(event)) event.preventDefault();
}

function init() {
  $("signin-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    $("signin-error").textContent = "";
    const value = $("token").value.trim();
    try {
      await signIn(value);
    } catch (err) {
      const detail = err instanceof ApiError ? err.message : String(err);
      $("signin-error").textContent = visible(`Sign-in failed: ${detail}`);
    }
  });
  $("signout").addEventListener("click", () => signOut());
  $("help-close").addEventListener("click", () => $("help").close());
  window.addEventListener("hashchange", () => {
    if (!$("app").hidden) route();
  });
  document.addEventListener("keydown", onKey);
  const saved = token.get();
  if (saved) {
    signIn(saved).catch((err) => signOut(`Sign-in failed: ${err.message}`));
  } else {
    signOut();
  }
}

init();
