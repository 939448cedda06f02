// Small DOM helpers shared by the views: element building (text only, never HTML strings, so
// nothing an agent writes can become markup; invisible characters shown as escapes, so nothing
// an agent writes can pass for something else), formatting, errors and scope checks.

export const session = { name: "", scopes: [] };

/** Whether the signed-in token may take actions needing `scope` (admin may do all). */
export function can(scope) {
  return session.scopes.includes("admin") || session.scopes.includes(scope);
}

// Characters a browser does not show as themselves: controls (C0, DEL, C1), format characters
// (bidi overrides and isolates such as U+202E, which make "\u202eevorppa" read "approve"; zero-
// width spaces and joiners; tag characters), lone surrogates, line and paragraph separators.
// The same set node/display/humanize.py escapes for the CLI.
const INVISIBLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Zl}\p{Zp}]/gu;
const INVISIBLE_BUT_LINES = /(?![\n\t])[\p{Cc}\p{Cf}\p{Cs}\p{Zl}\p{Zp}]/gu;
const SHORT_ESCAPES = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };

function escapeChar(char) {
  if (SHORT_ESCAPES[char]) return SHORT_ESCAPES[char];
  const code = char.codePointAt(0);
  const hex = code.toString(16);
  if (code < 0x100) return `\\x${hex.padStart(2, "0")}`;
  return code < 0x10000 ? `\\u${hex.padStart(4, "0")}` : `\\U${hex.padStart(8, "0")}`;
}

/** `text` with every invisible character written as its escape (`\x1b`, `\u202e`, `\n`);
 * with `lines`, line feeds and tabs stay (a <pre> lays them out). Every text the console shows
 * goes through this: h() and fill() do it for their text children and labels. */
export function visible(text, { lines = false } = {}) {
  return String(text).replace(lines ? INVISIBLE_BUT_LINES : INVISIBLE, escapeChar);
}

// attributes a person reads (a tooltip, what a screen reader says); others are data
const READ_ATTRIBUTES = new Set(["title", "aria-label", "placeholder", "alt"]);

/** h("button", {class: "x", onclick: f}, "text", child) → an element. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (value === true) el.setAttribute(key, "");
    else el.setAttribute(key, READ_ATTRIBUTES.has(key) ? visible(value) : String(value));
  }
  const lines = tag === "pre";
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(visible(child, { lines })));
  }
  return el;
}

/** A form laid out in a row: `submit(form)` runs instead of the browser's own submit. */
export function inlineForm(attrs, submit, ...children) {
  const onsubmit = (event) => {
    event.preventDefault();
    submit(event.target);
  };
  return h("form", { class: "inline-form", ...attrs, onsubmit }, ...children);
}

/** A form's input with its label (`wide`: a field given a row's room). */
export function field(label, input, wide = false) {
  return h("span", { class: wide ? "field wide" : "field" }, h("label", { for: input.id }, label), input);
}

/** A button shown only when the token has `scope`. */
export function action(scope, label, onclick, attrs = {}) {
  return can(scope) ? h("button", { type: "button", onclick, ...attrs }, label) : null;
}

export function table(headers, rows, caption) {
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      {},
      caption ? h("caption", {}, caption) : null,
      h("thead", {}, h("tr", {}, headers.map((x) => h("th", { scope: "col" }, x)))),
      h("tbody", {}, rows),
    ),
  );
}

let errorTimer = null;

/** Show a failure (the problem+json detail) in the banner; it stays until replaced or timed out. */
export function showError(err, context = "") {
  const banner = document.getElementById("error");
  const message = err instanceof Error ? err.message : String(err);
  banner.textContent = visible(context ? `${context}: ${message}` : message);
  banner.hidden = false;
  clearTimeout(errorTimer);
  errorTimer = setTimeout(() => {
    banner.hidden = true;
  }, 15000);
}

export function clearError() {
  document.getElementById("error").hidden = true;
}

/** Run an action; a failure shows its detail instead of escaping. */
export async function attempt(context, fn) {
  try {
    clearError();
    return await fn();
  } catch (err) {
    showError(err, context);
    return undefined;
  }
}

export function when(ts) {
  if (!ts) return "";
  const d = new Date(ts);
  return Number.isNaN(d.getTime()) ? String(ts) : d.toLocaleString();
}

export function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

export function countdown(expiresAt) {
  const left = new Date(expiresAt).getTime() - Date.now();
  if (Number.isNaN(left)) return "";
  if (left <= 0) return "timing out";
  const s = Math.ceil(left / 1000);
  return `times out in ${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
}

export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}

export function json(value) {
  return JSON.stringify(value, null, 2);
}

/** A <select> of `options` ([value, label] or value), labelled for screen readers. */
export function select(id, label, options, onchange, value = "") {
  const el = h(
    "select",
    { id, onchange: (e) => onchange(e.target.value) },
    options.map((o) => {
      const [v, text] = Array.isArray(o) ? o : [o, o];
      return h("option", { value: v, selected: v === value }, text);
    }),
  );
  return h("span", { class: "field" }, h("label", { for: id }, label), el);
}

/** Replace `el`'s children; nested arrays are flattened, null/false parts left out, text shown
 * with its invisible characters escaped. */
export function fill(el, ...children) {
  const shown = children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false);
  el?.replaceChildren(...shown.map((c) => (c instanceof Node ? c : visible(c))));
}
