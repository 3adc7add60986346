package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
)

// NewCmdGenDocs builds the hidden `kvcanary gen-docs DIR` that `make docs`
// runs: man pages (DIR/man) and a Markdown command reference (DIR/*.md)
// generated from the command tree. TestDocsFresh regenerates them into a
// temporary directory and fails when the committed ones differ.
func NewCmdGenDocs(f *cmdutil.Factory) *cobra.Command {
	return &cobra.Command{
		Use:     "gen-docs DIR",
		Short:   "Write the man pages and the Markdown command reference into DIR",
		Example: `  kvcanary gen-docs docs/cli`,
		Hidden:  true,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := genDocs(cmd.Root(), args[0]); err != nil {
				return cmdutil.InputError(err)
			}
			fmt.Fprintf(f.IO.ErrOut, "wrote %s\n", args[0])
			return nil
		},
	}
}

// genDocs writes the docs of root's tree into dir, replacing what was there.
// The output depends on the command tree only: no generation date, no
// "auto generated" stamp, no host-dependent flag default.
func genDocs(root *cobra.Command, dir string) error {
	root.DisableAutoGenTag = true
	// What cobra adds only when it executes: the same tree whether the docs
	// are written by `kvcanary gen-docs` or by a test.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	root.InitDefaultVersionFlag()
	mdDir, manDir := dir, filepath.Join(dir, "man")
	for _, d := range []string{mdDir, manDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("write docs: %w", err)
		}
		old, _ := filepath.Glob(filepath.Join(d, "kvcanary*"))
		for _, p := range old {
			if err := os.Remove(p); err != nil {
				return fmt.Errorf("write docs: %w", err)
			}
		}
	}
	if err := doc.GenMarkdownTree(root, mdDir); err != nil {
		return fmt.Errorf("write markdown reference: %w", err)
	}
	// A man page's .TH line carries a month; a fixed one, blanked after
	// generation, keeps the pages a function of the commands alone.
	date := time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)
	hdr := &doc.GenManHeader{Title: "KVCANARY", Section: "1", Source: "kvcanary", Manual: "kvcanary manual", Date: &date}
	var walk func(c *cobra.Command) error
	walk = func(c *cobra.Command) error {
		if !c.IsAvailableCommand() && c != root || c.IsAdditionalHelpTopicCommand() {
			return nil
		}
		for _, sub := range c.Commands() {
			if err := walk(sub); err != nil {
				return err
			}
		}
		var buf bytes.Buffer
		h := *hdr
		if err := doc.GenMan(c, &h, &buf); err != nil {
			return fmt.Errorf("write man page of %s: %w", c.CommandPath(), err)
		}
		page := bytes.Replace(buf.Bytes(), []byte(`"`+date.Format("Jan 2006")+`"`), []byte(`""`), 1)
		name := strings.ReplaceAll(c.CommandPath(), " ", "-") + ".1"
		return os.WriteFile(filepath.Join(manDir, name), page, 0o644)
	}
	return walk(root)
}
