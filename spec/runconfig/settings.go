package runconfig

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// ServerArgCompared reports whether a server-reported arg is an engine
// Setting worth comparing between two runs: not an address, a path, a
// seed, a version or the server's live state, which differ between any
// two launches without changing the engine's behaviour.
func ServerArgCompared(key string) bool {
	k := strings.ToLower(key)
	if strings.Contains(k, ".") {
		return false // nested structures: live scheduler state (internal_states), versions
	}
	for _, w := range strings.Split(k, "_") {
		switch w {
		case "port", "host", "path", "dir", "seed", "version", "url", "addr", "ip", "log", "file", "throughput",
			"tokenizer", "key", "name", "prometheus", "metrics", "timeout", "interval", "watchdog", "last":
			return false
		}
	}
	return true
}

// ServerField maps one server arg onto a RunConfig field.
type ServerField struct {
	Arg     string                                  // the server arg's (flattened) name
	Setting string                                  // the setting it determines (a KnownSettings name)
	Set     func(rc *hook.RunConfig, v string) bool // sets the field from the arg's value; false when the value is unusable
}

// ServerFields maps SGLang server args (and two the twin reports) onto
// RunConfig fields.
var ServerFields = []ServerField{
	{"disable_cuda_graph", "cuda_graph", boolArg(func(rc *hook.RunConfig) **bool { return &rc.CUDAGraph }, true)},
	{"cuda_graph_max_bs", "cuda_graph_max_bs", positiveArg(func(rc *hook.RunConfig) *int { return &rc.CUDAGraphMaxBS })},
	{"max_running_requests", "max_running_requests", positiveArg(func(rc *hook.RunConfig) *int { return &rc.MaxRunningRequests })},
	{"max_total_num_tokens", "pool_tokens", positiveArg(func(rc *hook.RunConfig) *int { return &rc.PoolTokens })},
	// Not SGLang server args; the twin reports them (SGLang takes
	// multi-stream overlap from SGLANG_OPT_USE_MULTI_STREAM_OVERLAP).
	{"index_k_dtype", "index_k_dtype", func(rc *hook.RunConfig, v string) bool {
		if v != "fp8" && v != "bf16" && v != "fp4" {
			return false
		}
		rc.IndexKDtype = v
		return true
	}},
	{"multi_stream_overlap", "multi_stream_overlap", boolArg(func(rc *hook.RunConfig) **bool { return &rc.MultiStreamOverlap }, false)},
	{"kvcanary_inject", "inject", func(rc *hook.RunConfig, v string) bool {
		rc.Inject = nil
		if v != "" {
			rc.Inject = strings.Split(v, ",")
		}
		return true
	}},
	{"disaggregation_mode", "disaggregation", func(rc *hook.RunConfig, v string) bool {
		switch v {
		case "":
			return false
		case "null", "none":
			rc.Disaggregation = "none" // SGLang's value without disaggregation
		case "prefill", "decode", "pd":
			rc.Disaggregation = "pd"
		default:
			rc.Disaggregation = v
		}
		return true
	}},
}

// boolArg sets the *bool field picks from a boolean arg (negated for a
// disable_ arg).
func boolArg(field func(*hook.RunConfig) **bool, negate bool) func(*hook.RunConfig, string) bool {
	return func(rc *hook.RunConfig, v string) bool {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false
		}
		*field(rc) = hook.Bool(b != negate)
		return true
	}
}

// positiveArg sets the int field picks from a positive integer arg.
func positiveArg(field func(*hook.RunConfig) *int) func(*hook.RunConfig, string) bool {
	return func(rc *hook.RunConfig, v string) bool {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return false
		}
		*field(rc) = n
		return true
	}
}

// ServerMapped reports whether a server arg is carried by a RunConfig field
// (then only the field is compared, not "server.<arg>" too).
func ServerMapped(arg string) bool {
	for _, f := range ServerFields {
		if f.Arg == arg {
			return true
		}
	}
	return false
}

// SetProv records the provenance of setting name in rc.
func SetProv(rc *hook.RunConfig, name, prov string) {
	if rc.Provenance == nil {
		rc.Provenance = map[string]string{}
	}
	rc.Provenance[name] = prov
}

// ProvOf is the provenance of setting name in rc, "" when not recorded.
func ProvOf(rc hook.RunConfig, name string) string { return rc.Provenance[name] }

// SettingText is a setting's value as text, "" when unknown.
func SettingText(rc hook.RunConfig, name string) string {
	if name == "inject" { // kvcanary's own faults: always known
		if len(rc.Inject) == 0 {
			return "none"
		}
		return sortedJoin(rc.Inject)
	}
	for _, s := range KnownSettings(rc) {
		if s.Name == name {
			return fmt.Sprint(s.Value)
		}
	}
	return ""
}

// UnknownSettings lists the boolean engine settings rc does not know, in
// the order sessions.EngineFlags lists them.
func UnknownSettings(rc hook.RunConfig) []string {
	var out []string
	if rc.CUDAGraph == nil {
		out = append(out, "cuda_graph")
	}
	if rc.MultiStreamOverlap == nil {
		out = append(out, "multi_stream_overlap")
	}
	return out
}

// Setting is one known engine setting: its name and value.
type Setting struct {
	Name  string
	Value any
}

// KnownSettings lists rc's known engine settings in sessions.EngineFlags order,
// then extra.<key> and server.<arg> sorted.
func KnownSettings(rc hook.RunConfig) []Setting {
	var out []Setting
	str := func(name, v string) {
		if v != "" {
			out = append(out, Setting{Name: name, Value: v})
		}
	}
	num := func(name string, v int) {
		if v > 0 {
			out = append(out, Setting{Name: name, Value: v})
		}
	}
	str("index_k_dtype", rc.IndexKDtype)
	if rc.CUDAGraph != nil {
		out = append(out, Setting{Name: "cuda_graph", Value: *rc.CUDAGraph})
	}
	num("cuda_graph_max_bs", rc.CUDAGraphMaxBS)
	if rc.MultiStreamOverlap != nil {
		out = append(out, Setting{Name: "multi_stream_overlap", Value: *rc.MultiStreamOverlap})
	}
	str("disaggregation", rc.Disaggregation)
	num("max_running_requests", rc.MaxRunningRequests)
	num("pool_tokens", rc.PoolTokens)
	num("tp_size", rc.TPSize)
	for _, k := range slices.Sorted(maps.Keys(rc.Extra)) {
		if IsWorkloadExtra(k) {
			continue // the client's workload (WorkloadExtra): a confound, never the flag under test
		}
		out = append(out, Setting{Name: "extra." + k, Value: rc.Extra[k]})
	}
	for _, k := range slices.Sorted(maps.Keys(rc.ServerArgs)) {
		if ServerArgCompared(k) && !ServerMapped(k) {
			out = append(out, Setting{Name: "server." + k, Value: rc.ServerArgs[k]})
		}
	}
	return out
}

// WorkloadExtraPrefix starts the RunConfig.Extra keys that describe the
// client's workload rather than an engine flag: sampling settings, the
// conversations file, header names. ab reads them as workload confounds,
// never as the flag under test.
const WorkloadExtraPrefix = "workload."

// IsWorkloadExtra reports whether an Extra key is a workload key.
func IsWorkloadExtra(key string) bool { return strings.HasPrefix(key, WorkloadExtraPrefix) }

func sortedJoin(ss []string) string {
	c := append([]string(nil), ss...)
	sort.Strings(c)
	return strings.Join(c, ",")
}
