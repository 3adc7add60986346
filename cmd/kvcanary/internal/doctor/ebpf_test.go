package doctor

import "testing"

func TestKernelVersion(t *testing.T) {
	for rel, want := range map[string][2]int{"6.18.44-fc-v857": {6, 18}, "5.15.0": {5, 15}, "5.4": {5, 4}, "4.19.0-rc1": {4, 19}} {
		ma, mi, ok := kernelVersion(rel)
		if !ok || ma != want[0] || mi != want[1] {
			t.Errorf("%s: %d.%d %v", rel, ma, mi, ok)
		}
	}
	if _, _, ok := kernelVersion("garbage"); ok {
		t.Error("parsed garbage")
	}
}
