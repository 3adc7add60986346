package cmdutil

import (
	"strings"

	"github.com/spf13/cobra"
)

// BundleExt is the file extension of a trace bundle, without the dot.
const BundleExt = "kvtrace"

// CompleteFlagValues registers shell completion of a flag's fixed values
// (an enum flag: --index-k-dtype bf16|fp8). A value ending in ':' is a
// prefix to go on typing after (sweep:N), so no space follows it. The flag
// must exist: a misspelt name panics at start-up, in every test.
func CompleteFlagValues(cmd *cobra.Command, flag string, values ...string) {
	vals := append([]string(nil), values...)
	err := cmd.RegisterFlagCompletionFunc(flag, func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		var out []string
		noSpace := false
		for _, v := range vals {
			// A comma-separated list flag (--require gpu,ebpf) completes its last item.
			prefix := ""
			last := toComplete
			if i := strings.LastIndexByte(toComplete, ','); i >= 0 {
				prefix, last = toComplete[:i+1], toComplete[i+1:]
			}
			if strings.HasPrefix(v, last) {
				out = append(out, prefix+v)
				noSpace = noSpace || strings.HasSuffix(v, ":")
			}
		}
		d := cobra.ShellCompDirectiveNoFileComp
		if noSpace {
			d |= cobra.ShellCompDirectiveNoSpace
		}
		return out, d
	})
	if err != nil {
		panic("cmdutil: complete --" + flag + ": " + err.Error())
	}
}

// CompleteFlagFiles registers completion of a flag's value as a file with
// one of exts (no dot): --record → *.kvtrace.
func CompleteFlagFiles(cmd *cobra.Command, flag string, exts ...string) {
	e := append([]string(nil), exts...)
	err := cmd.RegisterFlagCompletionFunc(flag, func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return e, cobra.ShellCompDirectiveFilterFileExt
	})
	if err != nil {
		panic("cmdutil: complete --" + flag + ": " + err.Error())
	}
}

// CompleteArgFiles makes cmd's positional arguments complete as files with
// one of exts (no dot): bundle arguments complete as *.kvtrace.
func CompleteArgFiles(cmd *cobra.Command, exts ...string) {
	e := append([]string(nil), exts...)
	cmd.ValidArgsFunction = func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return e, cobra.ShellCompDirectiveFilterFileExt
	}
}
