// Command schemagen regenerates the event schema's derived files in
// runtime/hook (run by `go generate ./runtime/hook`): see package
// runtime/hook/internal/schema.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvcanary/kvcanary/runtime/hook/internal/schema"
)

func main() {
	dir := "."
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	files, err := schema.Generate(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "schemagen:", err)
			os.Exit(1)
		}
	}
}
