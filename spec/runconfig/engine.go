package runconfig

import (
	"fmt"
	"maps"
	"slices"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// Contradiction is an engine setting two sources gave different values
// for: the user's statement (wrap --config, repro --label) and what the
// engine reported from inside, or two engine processes of one run. It is
// shown with both values and the one the verdict used; never silently
// resolved.
type Contradiction struct {
	Setting string `json:"setting"`
	// Stated is the value the run knew first and StatedBy where it came
	// from (hook.ProvLabel, hook.ProvServer, … or "engine <who>").
	Stated   string `json:"stated"`
	StatedBy string `json:"stated_by"`
	// Engine is the value an engine process reported, Reporter names it
	// ("decode rank 1").
	Engine   string `json:"engine"`
	Reporter string `json:"reporter,omitempty"`
	// Used is the value the run's configuration (and every verdict and
	// comparison over it) uses: the first engine report, since the engine
	// ran with it.
	Used string `json:"used"`
}

// String is one line: `multi_stream_overlap: stated false (label), the
// engine (decode rank 0) reports true; using true`.
func (c Contradiction) String() string {
	who := "the engine"
	if c.Reporter != "" {
		who += " (" + c.Reporter + ")"
	}
	return fmt.Sprintf("%s: %s says %s, %s reports %s; using %s", c.Setting, c.StatedBy, c.Stated, who, c.Engine, c.Used)
}

// EngineMerge folds the settings a run's engine processes report about
// themselves into the run's configuration, one process at a time. The zero
// value is ready to use.
type EngineMerge struct {
	role map[string]string // setting -> PD role of the process whose report the configuration holds
}

// Merge folds the settings one engine process reported (rep: the Config of
// its run.start; only values with provenance hook.ProvEngine count) into
// rc, the run's configuration; role is the process's PD role ("" outside
// PD), reporter names it ("decode rank 1").
//
// A setting rc did not know becomes known with provenance "engine". A
// setting rc knew from elsewhere (a label, the server) with another value
// is a Contradiction, and the engine's value is used: it is what ran. A
// setting another process of the same role reported otherwise is a
// Contradiction too, and the first report stays. The two PD roles are two
// engines whose settings may differ (a prefill side runs no decode
// graphs, its TP size is its own): a decode process's value replaces a
// prefill process's without a contradiction, since the decode side is where
// graphs replay and the decode-side layers are judged; a prefill value
// never replaces a decode one. Model is taken when rc has none. Returns the
// contradictions found.
func (m *EngineMerge) Merge(rc *hook.RunConfig, rep hook.RunConfig, role, reporter string) []Contradiction {
	if m.role == nil {
		m.role = map[string]string{}
	}
	var out []Contradiction
	for _, name := range slices.Sorted(maps.Keys(rep.Provenance)) {
		if rep.Provenance[name] != hook.ProvEngine {
			continue
		}
		v := SettingText(rep, name)
		if v == "" {
			continue // provenance without a value: nothing reported
		}
		old, prov := SettingText(*rc, name), rc.Provenance[name]
		if name == "inject" {
			old = "" // kvcanary's own faults: "none" is a default, not a statement
		}
		switch {
		case old == "":
			copySetting(rc, rep, name)
			SetProv(rc, name, hook.ProvEngine)
			m.role[name] = role
		case old == v:
			if prov != hook.ProvEngine {
				SetProv(rc, name, hook.ProvEngine) // confirmed by the engine: its own word now
				m.role[name] = role
			}
		case prov == hook.ProvEngine && m.role[name] != role:
			if m.role[name] == "prefill" && role == "decode" {
				copySetting(rc, rep, name)
				m.role[name] = role
			}
		case prov == hook.ProvEngine:
			out = append(out, Contradiction{Setting: name, Stated: old, StatedBy: "another engine process", Engine: v, Reporter: reporter, Used: old})
		default:
			by := prov
			if by == "" {
				by = "the run's configuration"
			} else if by == hook.ProvLabel {
				by = "label (--config)"
			}
			out = append(out, Contradiction{Setting: name, Stated: old, StatedBy: by, Engine: v, Reporter: reporter, Used: v})
			copySetting(rc, rep, name)
			SetProv(rc, name, hook.ProvEngine)
			m.role[name] = role
		}
	}
	if rc.Model == "" && rep.Model != "" {
		rc.Model = rep.Model
	}
	return out
}

// copySetting sets setting name of dst to src's value.
func copySetting(dst *hook.RunConfig, src hook.RunConfig, name string) {
	switch name {
	case "index_k_dtype":
		dst.IndexKDtype = src.IndexKDtype
	case "cuda_graph":
		dst.CUDAGraph = hook.Bool(*src.CUDAGraph)
	case "cuda_graph_max_bs":
		dst.CUDAGraphMaxBS = src.CUDAGraphMaxBS
	case "multi_stream_overlap":
		dst.MultiStreamOverlap = hook.Bool(*src.MultiStreamOverlap)
	case "disaggregation":
		dst.Disaggregation = src.Disaggregation
	case "max_running_requests":
		dst.MaxRunningRequests = src.MaxRunningRequests
	case "pool_tokens":
		dst.PoolTokens = src.PoolTokens
	case "tp_size":
		dst.TPSize = src.TPSize
	default:
		if key, ok := cutExtra(name); ok {
			if dst.Extra == nil {
				dst.Extra = map[string]string{}
			}
			dst.Extra[key] = src.Extra[key]
		}
	}
}

func cutExtra(name string) (string, bool) {
	const p = "extra."
	if len(name) > len(p) && name[:len(p)] == p {
		return name[len(p):], true
	}
	return "", false
}
