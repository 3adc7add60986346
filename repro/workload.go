package repro

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/kvcanary/kvcanary/spec/runconfig"
)

// Sampling are the sampling settings a harness sends with every chat
// request. A nil field is not sent (the server's default applies).
type Sampling struct {
	Temperature *float64 // "temperature", 0..2
	TopP        *float64 // "top_p", (0, 1]
	Seed        *int64   // "seed": the server's sampling seed (not HarnessOptions.Seed, which picks the tasks)
}

func (s Sampling) validate() error {
	if t := s.Temperature; t != nil && (math.IsNaN(*t) || *t < 0 || *t > 2) {
		return fmt.Errorf("temperature %v: want 0 to 2", *t)
	}
	if p := s.TopP; p != nil && (math.IsNaN(*p) || *p <= 0 || *p > 1) {
		return fmt.Errorf("top_p %v: want above 0, at most 1", *p)
	}
	return nil
}

// WorkloadExtra is what the options add to the run configuration's Extra:
// the sampling settings and max_tokens sent, the conversations' source and
// digest, and the names (never the values) of extra headers; whether an API
// key was sent, never the key. nil when there is nothing to add.
func (o *HarnessOptions) WorkloadExtra() map[string]string {
	m := map[string]string{}
	put := func(k, v string) { m[runconfig.WorkloadExtraPrefix+k] = v }
	if o.MaxTokens > 0 {
		put("max_tokens", strconv.Itoa(o.MaxTokens))
	}
	if t := o.Sampling.Temperature; t != nil {
		put("temperature", strconv.FormatFloat(*t, 'g', -1, 64))
	}
	if p := o.Sampling.TopP; p != nil {
		put("top_p", strconv.FormatFloat(*p, 'g', -1, 64))
	}
	if s := o.Sampling.Seed; s != nil {
		put("sampling_seed", strconv.FormatInt(*s, 10))
	}
	if o.ConversationsName != "" || len(o.Conversations) > 0 {
		put("conversations", o.ConversationsName)
		put("conversations_count", strconv.Itoa(len(o.Conversations)))
		if o.ConversationsDigest != "" {
			put("conversations_sha256", o.ConversationsDigest)
		}
	}
	if len(o.Headers) > 0 {
		names := make([]string, 0, len(o.Headers))
		for k := range o.Headers {
			names = append(names, k)
		}
		sort.Strings(names)
		put("headers", strings.Join(names, ","))
	}
	if o.APIKey != "" {
		put("api_key", "set")
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// HeaderClient is an HTTP client that sends the run's API key and headers
// with the calls made outside the harness (the server's settings), so they
// pass the same authentication as the sessions — to the --url host only: a
// redirect elsewhere (an SSO page) never receives them.
func (o *HarnessOptions) HeaderClient() *http.Client {
	host := ""
	if u, err := url.Parse(o.URL); err == nil {
		host = u.Host
	}
	return &http.Client{Transport: headerTransport{o: o, host: host}}
}

type headerTransport struct {
	o    *HarnessOptions
	host string
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.host != "" && r.URL.Host == t.host {
		r = r.Clone(r.Context())
		t.o.setHeaders(r)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// setHeaders puts the API key and the extra headers on a request.
func (o *HarnessOptions) setHeaders(req *http.Request) {
	for k, vs := range o.Headers {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if o.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+o.APIKey)
	}
}

// scrub replaces the API key and header values in s (a reason built from a
// server's answer, which might echo them) by placeholders.
func (o *HarnessOptions) scrub(s string) string {
	if o.APIKey != "" {
		s = strings.ReplaceAll(s, o.APIKey, "[api-key]")
	}
	for k, vs := range o.Headers {
		for _, v := range vs {
			if len(v) >= 4 {
				s = strings.ReplaceAll(s, v, "["+k+"]")
			}
		}
	}
	return s
}

// samplingJSON appends the sampling fields (and max_tokens) to a request
// body being built.
func (o *HarnessOptions) samplingJSON(b []byte) []byte {
	if o.MaxTokens > 0 {
		b = append(b, `,"max_tokens":`...)
		b = strconv.AppendInt(b, int64(o.MaxTokens), 10)
	}
	if t := o.Sampling.Temperature; t != nil {
		b = append(b, `,"temperature":`...)
		b = strconv.AppendFloat(b, *t, 'g', -1, 64)
	}
	if p := o.Sampling.TopP; p != nil {
		b = append(b, `,"top_p":`...)
		b = strconv.AppendFloat(b, *p, 'g', -1, 64)
	}
	if s := o.Sampling.Seed; s != nil {
		b = append(b, `,"seed":`...)
		b = strconv.AppendInt(b, *s, 10)
	}
	return b
}
