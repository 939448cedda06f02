// Drives a node's AG-UI run endpoint with the official @ag-ui/client HttpAgent:
// a run, a run that ends in an approval interrupt, and the run that resumes it.
// Usage: node agui-run.mjs <http://host:port/agui/agent> <bearer token>
// Prints one JSON report on stdout; tests/test_protocol_agui.py checks it.
import { HttpAgent, randomUUID } from "@ag-ui/client";

const [url, token] = process.argv.slice(2);
if (!url || !token) {
  console.error("usage: node agui-run.mjs <url> <token>");
  process.exit(2);
}

const warnings = [];
console.warn = (...args) => warnings.push(args.map(String).join(" "));

const agent = new HttpAgent({ url, headers: { Authorization: `Bearer ${token}` } });

async function run(params = {}) {
  let finished = null;
  const { result, newMessages } = await agent.runAgent(params, {
    onRunFinishedEvent: (p) => {
      finished = { outcome: p.outcome, interrupts: p.interrupts ?? [], result: p.result };
    },
  });
  const text = newMessages
    .filter((m) => m.role === "assistant" && typeof m.content === "string")
    .map((m) => m.content)
    .join("\n");
  return { ...finished, result: finished?.result ?? result, text };
}

function say(text) {
  agent.addMessage({ id: randomUUID(), role: "user", content: text });
}

say("hello from the AG-UI client");
const first = await run();

say("pay INV-JS-1");
const interrupted = await run();
const pendingAfterInterrupt = agent.pendingInterrupts.map((i) => i.id);

const resume = interrupted.interrupts.map((i) => ({ interruptId: i.id, status: "resolved" }));
const resumed = await run({ resume });
const pendingAfterResume = agent.pendingInterrupts.map((i) => i.id);

process.stdout.write(
  JSON.stringify({ first, interrupted, pendingAfterInterrupt, resumed, pendingAfterResume, warnings }),
);
