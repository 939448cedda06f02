// One live SSE stream over fetch (EventSource cannot send an Authorization header), parsed
// here, resumed with Last-Event-ID after a drop, with its state shown to the operator.

import { authHeaders, problemDetail, ApiError } from "./api.js";

const RETRY_FIRST_MS = 250;
const RETRY_MAX_MS = 5000;

/** Split a text buffer into complete SSE frames; returns [frames, rest]. */
export function parseFrames(buffer) {
  const frames = [];
  const blocks = buffer.replace(/\r\n?/g, "\n").split("\n\n");
  const rest = blocks.pop();
  for (const block of blocks) {
    const frame = { event: "message", data: [], id: null };
    for (const line of block.split("\n")) {
      if (!line || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") frame.event = value;
      else if (field === "data") frame.data.push(value);
      else if (field === "id") frame.id = value;
    }
    if (frame.data.length || frame.id !== null) {
      frames.push({ ...frame, data: frame.data.join("\n") });
    }
  }
  return [frames, rest];
}

export class LiveStream {
  /**
   * @param {string} path the SSE endpoint
   * @param {{onEvent: Function, onState: Function, onOpen: Function, onFatal: Function}} hooks
   */
  constructor(path, hooks) {
    this.path = path;
    this.hooks = hooks;
    this.lastId = null;
    this.stopped = false;
    this.controller = null;
  }

  start() {
    this.stopped = false;
    this.#loop();
  }

  stop() {
    this.stopped = true;
    this.controller?.abort();
  }

  async #loop() {
    let delay = RETRY_FIRST_MS;
    let first = true;
    while (!this.stopped) {
      this.hooks.onState(first ? "connecting" : "reconnecting");
      try {
        await this.#once(() => {
          delay = RETRY_FIRST_MS;
        });
      } catch (err) {
        if (err instanceof ApiError && (err.status === 401 || err.status === 403)) {
          this.hooks.onFatal(err);
          return;
        }
        if (err instanceof ApiError && err.status === 400 && this.lastId !== null) {
          // an id this node never issued (its data was replaced): start afresh
          this.lastId = null;
        }
      }
      if (this.stopped) return;
      first = false;
      this.hooks.onState("reconnecting");
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, RETRY_MAX_MS);
    }
  }

  async #once(onConnected) {
    this.controller = new AbortController();
    const headers = authHeaders({ Accept: "text/event-stream" });
    if (this.lastId !== null) headers["Last-Event-ID"] = this.lastId;
    const response = await fetch(this.path, {
      headers,
      cache: "no-store",
      signal: this.controller.signal,
    });
    if (!response.ok) throw new ApiError(response.status, await problemDetail(response));
    onConnected();
    this.hooks.onState("live");
    this.hooks.onOpen(this.lastId !== null);
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      const [frames, rest] = parseFrames(buffer);
      buffer = rest;
      for (const frame of frames) {
        if (frame.id !== null && frame.id !== "") this.lastId = frame.id;
        if (frame.event === "keepalive") continue;
        let data;
        try {
          data = JSON.parse(frame.data || "{}");
        } catch {
          continue; // not ours to show
        }
        this.hooks.onEvent(frame.event, data, frame.id);
      }
    }
  }
}
