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
package hook
