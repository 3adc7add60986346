// Package cmdutil holds what every kvcanary command shares: the IO streams
// (with TTY detection), the one --json helper, typed exit codes, and quoting of
// untrusted text before it reaches a terminal. It holds no command logic.
package cmdutil
