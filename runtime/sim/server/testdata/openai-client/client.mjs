// Drives a kvcanary twin server with the official openai SDK and prints what
// it saw as one JSON object (server/openai_node_test.go asserts on it).
// Usage: node client.mjs http://127.0.0.1:PORT
import OpenAI from "openai";

const base = process.argv[2];
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "unused", maxRetries: 0, timeout: 120000 });
const tools = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather for a place",
    parameters: { type: "object", properties: { location: { type: "string" } }, required: ["location"] },
  },
}];
const out = {};

const models = await client.models.list();
out.models = models.data.map((m) => m.id);

// Non-streaming: a tool call, then the plain-text answer after its result.
const user = { role: "user", content: "Plan my Sunday walk. tool rounds: 1" };
const first = await client.chat.completions.create({ model: out.models[0], messages: [user], tools });
const c0 = first.choices[0];
out.nonstream = {
  id: first.id,
  object: first.object,
  finish_reason: c0.finish_reason,
  content: c0.message.content,
  tool_calls: (c0.message.tool_calls ?? []).map((t) => ({ id: t.id, type: t.type, name: t.function.name, arguments: t.function.arguments })),
  usage: first.usage,
};
const call = c0.message.tool_calls?.[0];
if (call) {
  const second = await client.chat.completions.create({
    model: out.models[0],
    tools,
    messages: [user, c0.message, { role: "tool", tool_call_id: call.id, content: JSON.stringify({ sky: "clear", celsius: 21 }) }],
  });
  out.answer = { finish_reason: second.choices[0].finish_reason, content: second.choices[0].message.content, tool_calls: second.choices[0].message.tool_calls ?? [] };
}

// Streaming: accumulate the tool-call deltas the SDK hands out.
const stream = await client.chat.completions.create({
  model: out.models[0],
  messages: [{ role: "user", content: "Check the weather in Lisbon. tool rounds: 2" }],
  tools,
  stream: true,
  stream_options: { include_usage: true },
});
const acc = { chunks: 0, role: "", content: "", calls: [], finish_reason: null, usage: null, ids: new Set() };
for await (const chunk of stream) {
  acc.chunks++;
  acc.ids.add(chunk.id);
  if (chunk.usage) acc.usage = chunk.usage;
  for (const ch of chunk.choices) {
    if (ch.delta.role) acc.role = ch.delta.role;
    if (ch.delta.content) acc.content += ch.delta.content;
    for (const tc of ch.delta.tool_calls ?? []) {
      acc.calls[tc.index] ??= { id: "", type: "", name: "", arguments: "" };
      const a = acc.calls[tc.index];
      if (tc.id) a.id = tc.id;
      if (tc.type) a.type = tc.type;
      if (tc.function?.name) a.name += tc.function.name;
      if (tc.function?.arguments) a.arguments += tc.function.arguments;
    }
    if (ch.finish_reason) acc.finish_reason = ch.finish_reason;
  }
}
out.stream = { ...acc, ids: [...acc.ids] };

// A malformed request surfaces as the SDK's BadRequestError.
try {
  await client.chat.completions.create({ model: out.models[0], messages: [] });
  out.bad = { thrown: false };
} catch (e) {
  out.bad = { thrown: true, name: e.constructor.name, status: e.status, type: e.type ?? e.error?.type, param: e.param ?? e.error?.param };
}

process.stdout.write(JSON.stringify(out) + "\n");
