// Package cmdutil holds what every kvcanary command shares: the IO streams
// (with TTY detection), the one --json helper, typed exit codes, quoting of
// untrusted text before it reaches a terminal, and the one table printer
// (aligned columns, on a terminal and in a pipe). It holds no command logic.
package cmdutil
