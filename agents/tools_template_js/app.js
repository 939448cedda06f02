// tools_template_js: answers questions with a model that calls this agent's tools.
//
// A task {"question": "..."} is one conversation: each round is one `infer` with the messages
// so far and the tools (JSON Schema functions); each tool call the model makes is run here
// (TOOLS) and its result sent back as a `tool` message, until the model answers in words.
// On a node: [agents.capabilities] inference = true, [agents.inference] models = ["local"].
import { infer } from "agent-runtime:agent/host@0.3.0";

const MAX_ROUNDS = 5;

// ---- helpers: one chat round, and a tool-calling loop ----------------------------------------
// One inference call: the node's answer {message, finish_reason, usage, model}. Options: model,
// max_tokens, temperature, tool_choice, response_format. Throws with the host-error as payload.
export function chat(messages, tools = [], options = {}) {
  const request = { messages, ...options };
  if (tools.length) request.tools = tools;
  return JSON.parse(infer(JSON.stringify(request)));
}

export function fn(name, description, parameters) {
  return { type: "function", function: { name, description, parameters } };
}

// Call the model until it answers in words; `tools` maps a name to [schema, function(args)].
export function runWithTools(messages, tools, options = {}, maxRounds = MAX_ROUNDS) {
  const schemas = Object.values(tools).map(([schema]) => schema);
  const used = { input_tokens: 0, output_tokens: 0 };
  for (let rounds = 1; rounds <= maxRounds; rounds++) {
    const answer = chat(messages, schemas, options);
    used.input_tokens += answer.usage.input_tokens;
    used.output_tokens += answer.usage.output_tokens;
    const message = answer.message;
    messages.push(message);
    const calls = message.tool_calls ?? [];
    if (!calls.length) return { answer: message.content, rounds, ...used };
    for (const call of calls) {
      let result;
      try {
        const tool = tools[call.function.name];
        result = tool ? tool[1](JSON.parse(call.function.arguments || "{}")) : { error: "no such tool" };
      } catch (e) {
        result = { error: String(e) };
      }
      messages.push({ role: "tool", tool_call_id: call.id, content: JSON.stringify(result) });
    }
  }
  return { answer: null, rounds: maxRounds, error: "no answer in time", ...used };
}

// ---- this agent's tools ------------------------------------------------------------------------
const FORECASTS = { paris: "sunny, 21 C", oslo: "snow, -3 C" };
const TOOLS = {
  forecast: [
    fn("forecast", "Tomorrow's weather in a city", {
      type: "object",
      properties: { city: { type: "string" } },
      required: ["city"],
    }),
    (args) => ({ forecast: FORECASTS[String(args.city ?? "").toLowerCase()] ?? "unknown" }),
  ],
};

export function tick() {}

export function handleTask(task) {
  const data = JSON.parse(task.input || "{}");
  const messages = [
    { role: "system", content: "You answer questions about the weather with the tools you have." },
    { role: "user", content: String(data.question ?? "") },
  ];
  try {
    return JSON.stringify(runWithTools(messages, TOOLS, { max_tokens: 512 }));
  } catch (e) {
    const error = e.payload ?? { tag: "failed", val: String(e) };
    throw `inference failed (${error.tag}): ${error.val}`;
  }
}

export function listTools() {
  return [];
}

export function callTool(name) {
  throw `unknown tool ${name}`;
}

// MCP beyond tools (world 0.3.0): this agent offers none of them; the node adds its own
// resources, read from the journal (agent://<name>/state, findings, logs...)
export function callToolContent(name, args) {
  return JSON.stringify([{ type: "text", text: callTool(name, args) }]);
}

export function listPrompts() {
  return [];
}

export function getPrompt(name) {
  throw `unknown prompt ${name}`;
}

export function completeArgument() {
  return [];
}

export function listResources() {
  return [];
}

export function listResourceTemplates() {
  return [];
}

export function readResource(uri) {
  throw `no resource ${uri}`;
}
