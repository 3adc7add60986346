package cmdutil

import "github.com/kvcanary/kvcanary/internal/safetext"

// Quote returns s unchanged when it is printable text, and strconv-quoted
// otherwise (safetext.Quote), so untrusted strings can never send escape
// sequences to a terminal.
func Quote(s string) string { return safetext.Quote(s) }
