package pyhook

import (
	"os"
	"strings"
)

// WithPythonPath returns env with dir first on its PYTHONPATH, keeping the
// entries already there after it: how a launched interpreter finds the
// package Extract wrote.
func WithPythonPath(env []string, dir string) []string {
	out := make([]string, 0, len(env)+1)
	pp := dir
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PYTHONPATH="); ok {
			if v != "" {
				pp = dir + string(os.PathListSeparator) + v
			}
			continue
		}
		out = append(out, kv)
	}
	return append(out, "PYTHONPATH="+pp)
}
