// Package server serves the twin (runtime/sim) over an OpenAI-compatible HTTP
// API, so that any client — kvcanary repro, the official openai SDKs, curl —
// can drive it the way it would drive SGLang or vLLM:
//
//   - POST /v1/chat/completions, non-streaming and "stream": true (server-sent
//     events: "data: {chunk}" lines, tool calls as OpenAI streaming deltas,
//     "data: [DONE]" at the end);
//   - GET /v1/models and GET /health;
//   - GET /debug/kvcanary/requests: the ground-truth record of every request.
//
// One goroutine drives Engine.Step; every HTTP request is submitted to the same
// engine, so concurrent sessions batch together in its scheduler exactly as
// sim run's sessions do. Options.StepTime paces that loop (sim serve: 25 ms, the
// engine's simulated step), so a client's wall-clock tool time between rounds
// spans as many steps as sim run's think time; overruns are counted (Pace).
//
// The server observes and never judges: Options.Judge (sim serve passes repro's
// classifier) gives each reply an outcome, and only with a judge does Close
// publish session events. The judge is called from the HTTP handlers'
// goroutines, concurrently: it must be safe for that.
//
// # Conversations and the script
//
// The twin is a copy model: what it should say is decided by a script
// (sim.NewScript), and corruption shows as output that leaves it. A request's
// conversation picks its script and round:
//
//   - the session is the FNV-1a hash of the first user message's text (the
//     harness writes a distinct task per session), so every round of one
//     conversation lands on the same script;
//   - the round is the number of assistant messages already in the
//     conversation;
//   - the number of tool-call rounds T is read from the first user message's
//     "tool rounds: N" (kvcanary repro writes it; a real model reads it as an
//     instruction); without it, T comes from the script (1..rounds, Options.Rounds);
//   - rounds before T expect the script's tool call, round T and later expect
//     its plain-text answer; a request that offers no tools (or sets
//     tool_choice "none") expects the plain-text answer.
//
// The prompt is the script's prefix (system prompt, tool definitions, task),
// then each earlier assistant turn — the exact tokens this server produced when
// the message matches what it served, else the message re-encoded — followed
// by the tool messages' content, then the round's plan. The client's own
// system prompt and tool schemas only select behaviour; the twin's prompt text
// is the script's.
//
// # Ground truth
//
// Every request is recorded with deviated (the output tokens differ from the
// script's) and broken (the deviation is visible in the protocol: tool-call
// markup left in content, or no tool call in a round that expects one, or an
// aborted request). A client that classifies sessions the way kvcanary repro
// does sees exactly the sessions with a broken request as corrupted; deviated
// but unbroken requests (a garbled argument inside a well-formed call, garbled
// prose in a final answer) are invisible to any client and are counted apart.
//
// Error contract: malformed requests get OpenAI-style errors
// ({"error":{"message","type":"invalid_request_error","param","code"}}) with
// status 400 naming the offending field (or the byte offset of bad JSON);
// nothing a client sends panics the server. Requests whose Host is not a
// loopback name or one of Options.AllowedHosts, and requests carrying a
// browser Origin of another host, get 403 (a web page must not drive the
// twin by DNS rebinding or a cross-site POST); a chat request whose
// Content-Type is not application/json gets 415; a body not received within
// Options.BodyTimeout (default 30 s) gets 408 and its connection is closed. An aborted engine request is a 500
// with type "server_error" (in a stream: an error chunk, then [DONE]).
package server
