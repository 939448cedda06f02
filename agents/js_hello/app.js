// The JavaScript example: built with componentize-js (from npm) by scripts/build-agents, the
// same way `agent-node agent build` builds a project made with `agent new --lang js`.
//
// Every tick: one log line and one stdout line, and a tick counter in durable state. A task
// {"name": "..."} is answered {"greeting": "hello, ..."}; the MCP tool `greet` does the same.
import { log, stateGet, stateSet } from "agent-runtime:agent/host@0.1.0";

export function tick() {
  const ticks = Number(stateGet("ticks") ?? "0") + 1;
  stateSet("ticks", String(ticks));
  log("info", `hello from a JavaScript agent, tick ${ticks}`);
  console.log("js_hello on stdout"); // the node turns stdout/stderr lines into log events
}

function greet(input) {
  const { name } = JSON.parse(input);
  if (typeof name !== "string" || name === "") throw 'expected {"name": "..."}';
  return JSON.stringify({ greeting: `hello, ${name}` });
}

export function handleTask(task) {
  return greet(task.input);
}

export function listTools() {
  const schema = { type: "object", properties: { name: { type: "string" } }, required: ["name"] };
  return [{ name: "greet", description: "Greet someone by name", inputSchema: JSON.stringify(schema) }];
}

export function callTool(name, args) {
  if (name !== "greet") throw `unknown tool ${name}`;
  return greet(args);
}
