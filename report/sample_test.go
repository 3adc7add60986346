package report

import "testing"

func TestSampleSpansTheStream(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 100, 1000, 12345} {
		s := newSample[int](8)
		for i := range n {
			s.add(i)
		}
		sm := s.sampled()
		if sm.Total != uint64(n) || sm.Shown != len(s.kept) || len(s.kept) > 8 {
			t.Errorf("n=%d: %+v, kept %d", n, sm, len(s.kept))
		}
		for j, v := range s.kept {
			if uint64(v) != uint64(j)*sm.Stride {
				t.Errorf("n=%d: kept[%d] = %d, want every %dth value: %v", n, j, v, sm.Stride, s.kept)
				break
			}
		}
		// The last kept value is within one stride of the end: the sample
		// covers the whole stream.
		if n > 0 && uint64(n-1-s.kept[len(s.kept)-1]) >= sm.Stride {
			t.Errorf("n=%d: last kept %d, stride %d: the end of the stream is not covered", n, s.kept[len(s.kept)-1], sm.Stride)
		}
		if (n > 8) != sm.Partial() || (sm.Partial() && sm.Note("points") == "") {
			t.Errorf("n=%d: partial %v, note %q", n, sm.Partial(), sm.Note("points"))
		}
	}
	if got := (Sampled{Shown: 5, Total: 9, Stride: 2}).Note("points"); got != "a sample: 5 of 9 points (every 2nd, across the whole run)" {
		t.Errorf("note %q", got)
	}
}
