package server_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/sim/server"
)

// TestOfficialOpenAINodeClient drives the server with the official openai npm
// package (testdata/openai-client; .ci/run installs it): models, a
// non-streaming tool call and its plain-text follow-up, a streaming tool call
// assembled from SDK deltas, and a 400 surfacing as BadRequestError.
func TestOfficialOpenAINodeClient(t *testing.T) {
	dir := filepath.Join("testdata", "openai-client")
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed; install Node.js 18+ and run npm install in " + dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err != nil {
		t.Skipf("the openai npm package is not installed: run (cd runtime/sim/server/%s && npm install) — .ci/run does", dir)
	}
	if testing.Short() {
		t.Skip("-short: skips the node client")
	}
	_, hs := newTestServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client.mjs", hs.URL)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client.mjs: %v\n%s", err, stderr.String())
	}
	type call struct{ ID, Type, Name, Arguments string }
	var out struct {
		Models    []string `json:"models"`
		Nonstream struct {
			ID           string  `json:"id"`
			Object       string  `json:"object"`
			FinishReason string  `json:"finish_reason"`
			Content      *string `json:"content"`
			ToolCalls    []call  `json:"tool_calls"`
			Usage        struct {
				TotalTokens int `json:"total_tokens"`
			} `json:"usage"`
		} `json:"nonstream"`
		Answer struct {
			FinishReason string  `json:"finish_reason"`
			Content      *string `json:"content"`
			ToolCalls    []any   `json:"tool_calls"`
		} `json:"answer"`
		Stream struct {
			Chunks       int      `json:"chunks"`
			Role         string   `json:"role"`
			Calls        []call   `json:"calls"`
			FinishReason string   `json:"finish_reason"`
			IDs          []string `json:"ids"`
			Usage        *struct {
				TotalTokens int `json:"total_tokens"`
			} `json:"usage"`
		} `json:"stream"`
		Bad struct {
			Thrown bool   `json:"thrown"`
			Name   string `json:"name"`
			Status int    `json:"status"`
			Type   string `json:"type"`
			Param  string `json:"param"`
		} `json:"bad"`
	}
	if err := json.Unmarshal(outb, &out); err != nil {
		t.Fatalf("client output %q: %v", outb, err)
	}
	if len(out.Models) != 1 || out.Models[0] != server.DefaultModel {
		t.Errorf("models %v", out.Models)
	}
	ns := out.Nonstream
	if ns.Object != "chat.completion" || ns.FinishReason != "tool_calls" || ns.Content != nil || len(ns.ToolCalls) != 1 || ns.Usage.TotalTokens == 0 {
		t.Errorf("non-streaming: %+v", ns)
	} else if c := ns.ToolCalls[0]; c.Type != "function" || c.ID == "" || c.Name == "" || !json.Valid([]byte(c.Arguments)) {
		t.Errorf("non-streaming call %+v", c)
	}
	if out.Answer.FinishReason != "stop" || out.Answer.Content == nil || *out.Answer.Content == "" || len(out.Answer.ToolCalls) != 0 {
		t.Errorf("answer after the tool result: %+v", out.Answer)
	}
	st := out.Stream
	if st.Role != "assistant" || st.FinishReason != "tool_calls" || len(st.Calls) != 1 || st.Chunks < 4 || len(st.IDs) != 1 || st.Usage == nil || st.Usage.TotalTokens == 0 {
		t.Errorf("streaming: %+v", st)
	} else if c := st.Calls[0]; c.Type != "function" || c.ID == "" || c.Name == "" || !json.Valid([]byte(c.Arguments)) {
		t.Errorf("streamed call %+v", c)
	}
	if b := out.Bad; !b.Thrown || b.Name != "BadRequestError" || b.Status != 400 || b.Param != "messages" {
		t.Errorf("bad request: %+v", b)
	}
}
