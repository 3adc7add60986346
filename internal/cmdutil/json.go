package cmdutil

import (
	"encoding/json"
	"io"

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

// WriteJSON writes v as indented JSON followed by a newline.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
