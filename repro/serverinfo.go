package repro

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/runconfig"
)

// ServerInfo is what a server said about its own settings.
type ServerInfo struct {
	// Endpoint is the path that answered: "/get_server_info",
	// "/server_info" (SGLang) or "/version" (vLLM, which reports no
	// settings over HTTP).
	Endpoint string
	// Args are the reported settings flattened to dotted keys (see
	// hook.RunConfig.ServerArgs).
	Args map[string]string
}

// maxServerInfoBytes bounds the body read from a server-info endpoint.
const maxServerInfoBytes = 4 << 20

// serverInfoPaths are tried in order; the first that answers 200 with a
// JSON object of the endpoint's shape (settingsShaped) wins.
var serverInfoPaths = []string{"/get_server_info", "/server_info", "/version"}

// ServerBase is the server's root URL for a --url given as host:port, …/v1
// or …/v1/chat/completions.
func ServerBase(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", fmt.Errorf("parse url %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("url %q: want an http:// or https:// URL with a host", raw)
	}
	p := strings.TrimRight(u.Path, "/")
	p = strings.TrimSuffix(p, "/chat/completions")
	p = strings.TrimSuffix(p, "/v1")
	u.Path, u.RawQuery, u.Fragment = p, "", ""
	return strings.TrimRight(u.String(), "/"), nil
}

// FetchServerInfo asks the server at rawURL for its settings: SGLang's GET
// /get_server_info, then /server_info, then vLLM's /version. Every attempt
// shares timeout. An error means the settings stay unknown; it is never a
// reason to stop a run.
func FetchServerInfo(ctx context.Context, c *http.Client, rawURL string, timeout time.Duration) (ServerInfo, error) {
	base, err := ServerBase(rawURL)
	if err != nil {
		return ServerInfo{}, fmt.Errorf("server info: %w", err)
	}
	if c == nil {
		c = http.DefaultClient
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var errs []error
	for _, p := range serverInfoPaths {
		args, err := getServerInfo(ctx, c, base+p)
		if err == nil {
			return ServerInfo{Endpoint: p, Args: args}, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", p, err))
		if ctx.Err() != nil {
			break
		}
	}
	return ServerInfo{}, fmt.Errorf("server info: %w", attempts(errs))
}

// attempts are the failed requests of FetchServerInfo: errors.Join's
// matching, on one line (it is printed in a status line, where Join's
// newlines came out quoted as a literal \n).
type attempts []error

func (a attempts) Error() string {
	msgs := make([]string, len(a))
	for i, err := range a {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (a attempts) Unwrap() []error { return a }

func getServerInfo(ctx context.Context, c *http.Client, u string) (map[string]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxServerInfoBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxServerInfoBytes {
		return nil, fmt.Errorf("body over %d bytes", maxServerInfoBytes)
	}
	var obj map[string]any
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, fmt.Errorf("want a JSON object: %w", err)
	}
	if !settingsShaped(u, obj) {
		return nil, errors.New("the answer is not a server's settings (a catch-all route?)")
	}
	return FlattenArgs(obj), nil
}

// settingsShaped says obj is what the endpoint serves: vLLM's /version a
// "version", SGLang's server info at least one server argument it always
// has. A server answering every path with a chat completion (a proxy, a
// test double) must not have its reply recorded as settings: that text
// would reach the bundle as server arguments.
func settingsShaped(u string, obj map[string]any) bool {
	if strings.HasSuffix(u, "/version") {
		_, ok := obj["version"].(string)
		return ok
	}
	for _, k := range []string{"model_path", "tp_size", "disable_cuda_graph", "cuda_graph_max_bs", "served_model_name", "attention_backend"} {
		if _, ok := obj[k]; ok {
			return true
		}
	}
	return false
}

// FlattenArgs flattens a JSON object into dotted keys: nested objects by
// key ("a.b"), arrays by index ("a.0"); numbers and booleans as JSON text,
// strings as given, null as "null".
func FlattenArgs(obj map[string]any) map[string]string {
	out := map[string]string{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(prefix+k+".", e)
			}
			return
		case []any:
			for i, e := range x {
				walk(prefix+strconv.Itoa(i)+".", e)
			}
			return
		}
		key := strings.TrimSuffix(prefix, ".")
		if secretArg(key) {
			// SGLang reports its own --api-key, --admin-api-key, SSL
			// passwords: kept as whether they are set, never their value.
			if v == nil || v == "" {
				out[key] = "null"
			} else {
				out[key] = "set"
			}
			return
		}
		switch x := v.(type) {
		case string:
			out[key] = x
		case nil:
			out[key] = "null"
		default:
			b, _ := json.Marshal(x)
			out[key] = string(b)
		}
	}
	walk("", obj)
	return out
}

// secretArg says a server arg holds a credential by its name (a word key,
// token (not tokens: max_total_num_tokens is a setting), secret, password,
// passwd or credential, in any part of a dotted
// name): the bundle, the stream and the dashboard get "set", never the value.
func secretArg(key string) bool {
	for _, part := range strings.Split(strings.ToLower(key), ".") {
		for _, w := range strings.FieldsFunc(part, func(r rune) bool { return r == '_' || r == '-' }) {
			switch w {
			case "key", "token", "secret", "password", "passwd", "credential", "apikey":
				return true
			}
		}
	}
	return false
}

// ApplyServerInfo records what the server reported in rc: ServerArgs, and
// the fields it determines with provenance "server". A server-reported
// value replaces a label for the same setting; conflicts are returned as
// notes ("label cuda_graph=on contradicts the server: …").
func ApplyServerInfo(rc *hook.RunConfig, info ServerInfo) (notes []string) {
	if len(info.Args) == 0 {
		return nil
	}
	rc.ServerArgs = maps.Clone(info.Args)
	for _, f := range runconfig.ServerFields {
		v, ok := info.Args[f.Arg]
		if !ok {
			continue
		}
		before := runconfig.SettingText(*rc, f.Setting)
		wasLabel := runconfig.ProvOf(*rc, f.Setting) == hook.ProvLabel
		if !f.Set(rc, v) {
			continue
		}
		if after := runconfig.SettingText(*rc, f.Setting); wasLabel && before != after {
			notes = append(notes, fmt.Sprintf("label %s=%s contradicts the server (%s=%s); the server's value is kept", f.Setting, before, f.Arg, v))
		}
		runconfig.SetProv(rc, f.Setting, hook.ProvServer)
	}
	return notes
}

// SetSetting states one engine setting by name (an EngineFlagDiffs name
// without "extra."; other keys go to Extra) with its provenance. Booleans
// take on/off, true/false, 1/0 or yes/no.
func SetSetting(rc *hook.RunConfig, key, value, prov string) error {
	intVal := func(dst *int) error {
		n, err := strconv.Atoi(value)
		if err != nil || n < 0 {
			return errors.New("want a whole number ≥ 0")
		}
		*dst = n
		return nil
	}
	boolVal := func(dst **bool) error {
		switch strings.ToLower(value) {
		case "on", "true", "1", "yes":
			*dst = hook.Bool(true)
		case "off", "false", "0", "no":
			*dst = hook.Bool(false)
		default:
			return errors.New("want on or off")
		}
		return nil
	}
	var err error
	name := key
	switch key {
	case "model":
		rc.Model = value
		return nil // the model is workload, not an engine setting
	case "index_k_dtype":
		if value != "fp8" && value != "bf16" {
			return errors.New("want fp8 or bf16")
		}
		rc.IndexKDtype = value
	case "cuda_graph":
		err = boolVal(&rc.CUDAGraph)
	case "multi_stream_overlap":
		err = boolVal(&rc.MultiStreamOverlap)
	case "cuda_graph_max_bs":
		err = intVal(&rc.CUDAGraphMaxBS)
	case "max_running_requests":
		err = intVal(&rc.MaxRunningRequests)
	case "pool_tokens":
		err = intVal(&rc.PoolTokens)
	case "disaggregation":
		rc.Disaggregation = value
	default:
		if rc.Extra == nil {
			rc.Extra = map[string]string{}
		}
		rc.Extra[key] = value
		name = "extra." + key
	}
	if err != nil {
		return err
	}
	runconfig.SetProv(rc, name, prov)
	return nil
}

// ParseLabels states the KEY=VALUE settings in kvs on rc with provenance
// label; flag names the flag in errors ("--label").
func ParseLabels(rc *hook.RunConfig, flag string, kvs []string) error {
	seen := map[string]bool{}
	for i, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return fmt.Errorf("%s %d %q: want KEY=VALUE", flag, i+1, kv)
		}
		if seen[k] {
			return fmt.Errorf("%s %d %q: key %s stated twice", flag, i+1, kv, k)
		}
		seen[k] = true
		if err := SetSetting(rc, k, v, hook.ProvLabel); err != nil {
			return fmt.Errorf("%s %d %q: %w", flag, i+1, kv, err)
		}
	}
	return nil
}

// MergeSettings copies the engine settings of src that are known into dst,
// with their provenance, and src's ServerArgs; dst's workload is kept.
func MergeSettings(dst *hook.RunConfig, src hook.RunConfig) {
	if src.IndexKDtype != "" {
		dst.IndexKDtype = src.IndexKDtype
	}
	if src.CUDAGraph != nil {
		dst.CUDAGraph = hook.Bool(*src.CUDAGraph)
	}
	if src.CUDAGraphMaxBS > 0 {
		dst.CUDAGraphMaxBS = src.CUDAGraphMaxBS
	}
	if src.MultiStreamOverlap != nil {
		dst.MultiStreamOverlap = hook.Bool(*src.MultiStreamOverlap)
	}
	if src.Disaggregation != "" {
		dst.Disaggregation = src.Disaggregation
	}
	if src.MaxRunningRequests > 0 {
		dst.MaxRunningRequests = src.MaxRunningRequests
	}
	if src.PoolTokens > 0 {
		dst.PoolTokens = src.PoolTokens
	}
	if src.Model != "" && dst.Model == "" {
		dst.Model = src.Model
	}
	for k, v := range src.Extra {
		if dst.Extra == nil {
			dst.Extra = map[string]string{}
		}
		dst.Extra[k] = v
	}
	for k, v := range src.Provenance {
		runconfig.SetProv(dst, k, v)
	}
	if src.ServerArgs != nil {
		dst.ServerArgs = maps.Clone(src.ServerArgs)
	}
	if dst.Provenance == nil {
		// Asked, nothing known: an empty map says "not guessed" to readers
		// of older bundles' rules (see hook.RunConfig.UnmarshalJSON).
		dst.Provenance = map[string]string{}
	}
}
