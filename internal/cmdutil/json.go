package cmdutil

import (
	"bytes"
	"encoding/json"
	"io"

	"github.com/kvcanary/kvcanary/internal/safetext"

	"github.com/spf13/cobra"
)

// JSONFlags is the one --json switch every reporting command shares.
type JSONFlags struct {
	JSON bool
}

// AddJSONFlags registers --json on cmd and returns the holder.
func AddJSONFlags(cmd *cobra.Command) *JSONFlags {
	f := &JSONFlags{}
	cmd.Flags().BoolVar(&f.JSON, "json", false, "print the report as one JSON object on stdout")
	return f
}

// WriteJSON writes v as indented JSON followed by a newline. C1 controls
// and bidi formatting characters inside strings are written as \u escapes
// (safetext.EscapeJSON), so a report piped to a terminal cannot drive it.
func WriteJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	out := buf.Bytes()
	if safetext.NeedsJSONEscape(out) {
		out = safetext.EscapeJSON(make([]byte, 0, len(out)+64), out)
	}
	_, err := w.Write(out)
	return err
}
