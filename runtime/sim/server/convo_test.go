package server

import (
	"testing"

	"github.com/kvcanary/kvcanary/runtime/sim"
)

func TestParamsOf(t *testing.T) {
	ps := paramsOf(`{"b":"text","a":[1, 2],"c":true}`)
	if len(ps) != 3 || ps[0] != (sim.Param{Name: "b", String: true, Value: "text"}) || ps[1] != (sim.Param{Name: "a", Value: "[1,2]"}) || ps[2].Value != "true" {
		t.Fatalf("paramsOf: %+v", ps)
	}
	if ps := paramsOf(`not json`); len(ps) != 1 || ps[0].Value != "not json" {
		t.Fatalf("paramsOf(garbage): %+v", ps)
	}
}
