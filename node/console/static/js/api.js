// The node's public API with the tab's bearer token; every failure carries the problem detail.

const TOKEN_KEY = "agent-node-token";

export class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY),
  set: (value) => sessionStorage.setItem(TOKEN_KEY, value),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

export function authHeaders(extra = {}) {
  return { Authorization: `Bearer ${token.get() || ""}`, ...extra };
}

/** The problem+json `detail` of a failed response, or a plain description of it. */
export async function problemDetail(response) {
  const text = await response.text().catch(() => "");
  try {
    const body = JSON.parse(text);
    if (body && typeof body.detail === "string") return body.detail;
  } catch {
    // not JSON: fall through
  }
  return `${response.status} ${response.statusText}${text ? `: ${text.slice(0, 200)}` : ""}`;
}

/** fetch → parsed JSON; a non-2xx answer throws ApiError(status, detail). */
export async function api(path, { method = "GET", body, form } = {}) {
  const init = { method, headers: authHeaders(), cache: "no-store" };
  if (form) {
    init.body = form;
  } else if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    throw new ApiError(0, `the node is unreachable (${err.message})`);
  }
  if (!response.ok) throw new ApiError(response.status, await problemDetail(response));
  const type = response.headers.get("Content-Type") || "";
  return type.includes("json") ? response.json() : response.text();
}

/** The newest seq of a seq-polled list (/api/v1/logs, /api/v1/findings): the API has no
 * "tail" query, so gallop then bisect on "is there an entry after N" (about 2·log2(n) tiny
 * reads, never a full scan). */
export async function lastSeq(path) {
  const exists = async (n) => {
    const page = await api(`${path}?since=${n}&limit=1`);
    return Object.values(page).some((v) => Array.isArray(v) && v.length > 0);
  };
  let low = 0;
  let high = 1;
  while (await exists(high - 1)) {
    low = high;
    high *= 2;
  }
  // entries exist after low-1 (or low = 0); none after high-1
  while (high - low > 1) {
    const mid = Math.floor((low + high) / 2);
    if (await exists(mid - 1)) low = mid;
    else high = mid;
  }
  return low;
}

/** The last `count` entries of a seq-polled list, oldest first, and the seq to poll after. */
export async function tail(path, key, count) {
  const last = await lastSeq(path);
  const since = Math.max(0, last - count);
  const page = await api(`${path}?since=${since}&limit=${count}`);
  return { entries: page[key], nextSeq: page.next_seq };
}

/** Cancel a task through its agent's A2A endpoint (the REST API has no cancel); the node
 * journals `task.canceled` with this token's name and denies the approvals the task waits for. */
export async function cancelTask(agent, taskId) {
  const reply = await api(`/a2a/${encodeURIComponent(agent)}`, {
    method: "POST",
    body: { jsonrpc: "2.0", id: 1, method: "CancelTask", params: { id: taskId } },
  });
  if (reply.error) throw new ApiError(400, reply.error.message);
  return reply.result;
}
