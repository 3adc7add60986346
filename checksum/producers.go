package checksum

import (
	"cmp"
	"slices"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// Grouping by producer: which host, role (the record's side) and rank the
// records of each room came from, and what the rooms they took part in were
// judged. With prefill and decode on different hosts, this is what says
// "the mismatches are all between prefill-host-3 rank 1 and decode-host-7".

// ProducerCounts is one producer's share of a compare: the rooms it has a
// record in, by the class each room got.
type ProducerCounts struct {
	Node    string      `json:"node,omitempty"` // host; empty when the input named none (text logs)
	Role    hook.Side   `json:"role"`
	Rank    int         `json:"rank"`
	Rooms   int         `json:"rooms"`
	Classes ClassCounts `json:"classes"`
}

// NonMatching is the number of its rooms that are neither a match nor a
// warmup.
func (p *ProducerCounts) NonMatching() int {
	c := p.Classes
	return c.Mismatch + c.MissingDecode + c.MissingPrefill + c.Duplicate
}

// from is the record ID of e when the input identified its producer (a
// node, a rank or a stage); nil when it did not (a v1.0 log line), so
// nothing unobserved is shown.
func (c *Comparer) from(side int, e *entry) *RecordID {
	if !e.hasID() {
		return nil
	}
	id := c.id(side, e)
	return &id
}

// tally counts one judged room for every distinct producer of its records.
func (c *Comparer) tally(class string, pg, dg []entry) {
	if c.producers == nil {
		c.producers = map[uint64]*ProducerCounts{}
	}
	for s, g := range [][]entry{pg, dg} {
		for x := range g {
			key := uint64(s)<<32 | uint64(g[x].who)
			seen := false
			for y := 0; y < x; y++ {
				seen = seen || g[y].who == g[x].who
			}
			if seen {
				continue // another stage or a repeat of the same producer
			}
			p := c.lastProd[s]
			if p == nil || c.lastKey[s] != key {
				p = c.producers[key]
			}
			if p == nil {
				id := c.id(s, &g[x])
				p = &ProducerCounts{Node: id.Node, Role: id.Side, Rank: id.Rank}
				c.producers[key] = p
			}
			c.lastKey[s], c.lastProd[s] = key, p
			p.Rooms++
			p.Classes.add(class)
		}
	}
}

// producerList is the producers sorted by host, role (prefill first) and
// rank.
func (c *Comparer) producerList() []ProducerCounts {
	out := make([]ProducerCounts, 0, len(c.producers))
	for _, p := range c.producers {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b ProducerCounts) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(roleOrder(a.Role), roleOrder(b.Role)), cmp.Compare(a.Rank, b.Rank))
	})
	c.producers, c.lastProd = nil, [2]*ProducerCounts{}
	return out
}

func roleOrder(s hook.Side) int {
	if s == hook.SidePrefill {
		return 0
	}
	return 1
}
