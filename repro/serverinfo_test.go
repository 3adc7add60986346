package repro

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// sglangInfo is a /get_server_info body shaped like SGLang's: server args,
// scheduler info and live internal state.
func sglangInfo(maxBS int, disableGraph bool, port int) string {
	dg := "false"
	if disableGraph {
		dg = "true"
	}
	return `{"model_path":"deepseek-ai/DeepSeek-V3.2","tokenizer_path":"deepseek-ai/DeepSeek-V3.2","host":"0.0.0.0","port":` + itoa(port) +
		`,"random_seed":` + itoa(port+1) + `,"disable_cuda_graph":` + dg + `,"cuda_graph_max_bs":` + itoa(maxBS) +
		`,"disaggregation_mode":"decode","max_running_requests":null,"max_total_num_tokens":700000,"tp_size":8,"kv_cache_dtype":"auto",` +
		`"chunked_prefill_size":8192,"max_prefill_tokens":16384,"enable_two_batch_overlap":false,` +
		`"internal_states":[{"last_gen_throughput":` + itoa(port%97) + `.5,"avg_spec_accept_length":null}],"version":"0.5.` + itoa(port%7) + `"}`
}

func itoa(n int) string { return strconv.Itoa(n) }

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

func fakeInfoServer(t *testing.T, routes map[string]string) string {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := routes[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, body)
	}))
	t.Cleanup(hs.Close)
	return hs.URL
}

func TestFetchServerInfo(t *testing.T) {
	ctx := context.Background()
	// SGLang: /get_server_info answers; --url may carry /v1.
	u := fakeInfoServer(t, map[string]string{"/get_server_info": sglangInfo(64, false, 30000)})
	info, err := FetchServerInfo(ctx, nil, u+"/v1", time.Second)
	if err != nil || info.Endpoint != "/get_server_info" || info.Args["cuda_graph_max_bs"] != "64" || info.Args["disable_cuda_graph"] != "false" ||
		info.Args["internal_states.0.last_gen_throughput"] != "27.5" || info.Args["max_running_requests"] != "null" {
		t.Fatalf("sglang: %+v, %v", info, err)
	}
	// A later SGLang: only /server_info.
	u = fakeInfoServer(t, map[string]string{"/server_info": sglangInfo(32, true, 30000)})
	info, err = FetchServerInfo(ctx, nil, u+"/v1/chat/completions", time.Second)
	if err != nil || info.Endpoint != "/server_info" || info.Args["disable_cuda_graph"] != "true" {
		t.Fatalf("server_info: %+v, %v", info, err)
	}
	// vLLM: a version, no settings.
	u = fakeInfoServer(t, map[string]string{"/version": `{"version":"0.11.0"}`})
	info, err = FetchServerInfo(ctx, nil, u, time.Second)
	if err != nil || info.Endpoint != "/version" || info.Args["version"] != "0.11.0" {
		t.Fatalf("vllm: %+v, %v", info, err)
	}
	var rc hook.RunConfig
	ApplyServerInfo(&rc, info)
	if rc.CUDAGraph != nil || rc.MultiStreamOverlap != nil || rc.CUDAGraphMaxBS != 0 || len(rc.Provenance) != 0 {
		t.Errorf("a version alone set settings: %+v", rc)
	}
	// Nothing answers, or not JSON: an error naming each path.
	u = fakeInfoServer(t, map[string]string{"/get_server_info": "<html>"})
	if _, err := FetchServerInfo(ctx, nil, u, time.Second); err == nil || !strings.Contains(err.Error(), "/get_server_info: want a JSON object") ||
		!strings.Contains(err.Error(), "/version: status 404") || strings.Contains(err.Error(), "\n") {
		t.Errorf("no info: %q, want one line naming each path", err)
	}
	if _, err := FetchServerInfo(ctx, nil, "ftp://x", time.Second); err == nil {
		t.Error("ftp URL accepted")
	}
}

func TestApplyServerInfo(t *testing.T) {
	var rc hook.RunConfig
	if err := ParseLabels(&rc, "--label", []string{"cuda_graph=off", "multi_stream_overlap=on", "attention_backend=fa3"}); err != nil {
		t.Fatal(err)
	}
	notes := ApplyServerInfo(&rc, ServerInfo{Endpoint: "/get_server_info", Args: FlattenArgs(map[string]any{
		"disable_cuda_graph": false, "cuda_graph_max_bs": 48.0, "disaggregation_mode": "decode", "max_total_num_tokens": 700000.0,
		"max_running_requests": nil})})
	if rc.CUDAGraph == nil || !*rc.CUDAGraph || rc.CUDAGraphMaxBS != 48 || rc.Disaggregation != "pd" || rc.PoolTokens != 700000 || rc.MaxRunningRequests != 0 {
		t.Fatalf("settings %+v", rc)
	}
	want := map[string]string{"cuda_graph": "server", "cuda_graph_max_bs": "server", "disaggregation": "server", "pool_tokens": "server",
		"multi_stream_overlap": "label", "extra.attention_backend": "label"}
	for k, v := range want {
		if rc.Provenance[k] != v {
			t.Errorf("provenance %s = %q, want %q", k, rc.Provenance[k], v)
		}
	}
	if _, ok := rc.Provenance["max_running_requests"]; ok {
		t.Error("a null server arg made max_running_requests known")
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "label cuda_graph=false contradicts the server (disable_cuda_graph=false)") {
		t.Errorf("notes %q", notes)
	}
	for _, bad := range [][]string{{"cuda_graph"}, {"cuda_graph=maybe"}, {"a=1", "a=2"}, {"pool_tokens=-3"}} {
		if err := ParseLabels(&hook.RunConfig{}, "--label", bad); err == nil || !strings.Contains(err.Error(), "--label") {
			t.Errorf("ParseLabels(%q) = %v", bad, err)
		}
	}
}

// TestServerInfoKeepsNoSecrets: SGLang reports its own api_key (and admin
// keys, SSL passwords) in /get_server_info; the run keeps whether each is
// set, never the value, since server_args reach the bundle and the stream.
func TestServerInfoKeepsNoSecrets(t *testing.T) {
	args := FlattenArgs(map[string]any{"api_key": "sk-SECRET-1", "admin_api_key": nil, "ssl_keyfile_password": "pw-SECRET-2",
		"tokenizer_path": "/models/x", "disable_cuda_graph": false, "nested": map[string]any{"hf_token": "hf-SECRET-3"}})
	for k, v := range args {
		if strings.Contains(v, "SECRET") {
			t.Errorf("%s = %q: a secret kept", k, v)
		}
	}
	if args["api_key"] != "set" || args["admin_api_key"] != "null" || args["ssl_keyfile_password"] != "set" || args["nested.hf_token"] != "set" {
		t.Errorf("secrets: %v", args)
	}
	if args["tokenizer_path"] != "/models/x" || args["disable_cuda_graph"] != "false" {
		t.Errorf("a token*izer* is not a token, a setting is kept: %v", args)
	}
}

// TestHeaderClientOnlyToTheServer: the run's key and headers go to the
// --url host, never to a host a redirect points at.
func TestHeaderClientOnlyToTheServer(t *testing.T) {
	var elsewhere http.Header
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere = r.Header.Clone()
		w.Write([]byte(`{"model_path":"m"}`))
	}))
	defer other.Close()
	var here http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		here = r.Header.Clone()
		http.Redirect(w, r, strings.Replace(other.URL, "127.0.0.1", "localhost", 1)+"/get_server_info", http.StatusFound)
	}))
	defer srv.Close()
	o := &HarnessOptions{URL: srv.URL, APIKey: "sk-SECRET", Headers: http.Header{"X-Team": {"infra"}}}
	if _, err := FetchServerInfo(context.Background(), o.HeaderClient(), srv.URL, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if here.Get("Authorization") != "Bearer sk-SECRET" || here.Get("X-Team") != "infra" {
		t.Errorf("the server got %v", here)
	}
	if elsewhere == nil || elsewhere.Get("Authorization") != "" || elsewhere.Get("X-Team") != "" {
		t.Errorf("the redirect's host got %v", elsewhere)
	}
}
