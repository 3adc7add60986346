//go:generate go run ./internal/schemagen

// Package hook is kvcanary's event spine: the v1 event model every source
// produces and every analyzer and sink consumes, the in-process bus that fans
// events out, the wire protocol (framed binary and JSON lines, see WIRE.md), the
// collector that ingests it from many producers, and a Go emitter.
//
// Error contract: decoders never panic on any input. A malformed event — bad
// structure, or a value the event model forbids (Event.Validate; WIRE.md,
// "Values") — is reported as an error that names what was wrong and where (byte
// offset or line); the caller decides whether to skip it. Encoders refuse what
// decoders would reject. Collectors count rejected frames and keep serving;
// emitters never block their caller and count what they drop or refuse.
//
// Sources observe: nothing in this package judges an event.
//
// # One schema
//
// The event schema is the body structs of event.go: their fields, Go types
// and json tags, plus what a tag cannot say written beside each struct — the
// binary layout's field order and appended groups (//hook:binary), which
// kinds have a JSON fast path (//hook:fastjson), per-field value rules
// (`check` tags) and the wording of cross-field rules (//hook:values). From
// it `go generate ./runtime/hook` (internal/schemagen) writes binary_gen.go,
// jsonfast_gen.go, validate_gen.go, schema_gen.go and WIRE.md's layout and
// value tables; TestGeneratedFilesCurrent fails when any of them is stale.
// The structs are the source rather than a separate schema file because
// every producer and consumer already codes against them and encoding/json
// reads their tags: a second file would be a sixth place to keep in step.
// The binary order is written out, not taken from declaration order, because
// the wire must not change when someone reorders a struct (canary.pages
// already differs: slot_checked follows rewritten on the wire).
// The frame envelope (wire.go) and its JSON form (AppendJSON, PeekJSONLine)
// stay hand-written: they change with the wire version, not with the model.
package hook
