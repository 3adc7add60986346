package cmdutil

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
)

// AddLimitFlag adds --limit to cmd, bound to *n with default def: how many
// rows a report lists (where min is 0, 0 lists all). A value below min is
// refused when the flag is
// parsed (a usage error naming the flag), so no command checks it again.
// The report commands share it (checksum compare, logs scan, canary report,
// graphdiff report), one name and one check for one idea.
func AddLimitFlag(cmd *cobra.Command, n *int, def, min int, usage string) {
	*n = def
	cmd.Flags().Var(&limitValue{n: n, min: min}, "limit", usage)
}

// limitValue is --limit's pflag.Value: an int of at least min.
type limitValue struct {
	n   *int
	min int
}

func (v *limitValue) String() string {
	if v.n == nil {
		return "0"
	}
	return strconv.Itoa(*v.n)
}

func (v *limitValue) Set(s string) error {
	i, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("want a whole number")
	}
	if i < v.min {
		return fmt.Errorf("want %d or more", v.min)
	}
	*v.n = i
	return nil
}

func (v *limitValue) Type() string { return "int" }
