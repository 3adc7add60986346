package pyhook

import (
	"slices"
	"testing"
)

func TestWithPythonPath(t *testing.T) {
	for _, c := range []struct {
		env, want []string
	}{
		{[]string{"HOME=/h"}, []string{"HOME=/h", "PYTHONPATH=/p"}},
		{[]string{"PYTHONPATH="}, []string{"PYTHONPATH=/p"}},
		{[]string{"PYTHONPATH=/a:/b", "X=1"}, []string{"X=1", "PYTHONPATH=/p:/a:/b"}},
	} {
		if got := WithPythonPath(c.env, "/p"); !slices.Equal(got, c.want) {
			t.Errorf("WithPythonPath(%q) = %q, want %q", c.env, got, c.want)
		}
	}
}
