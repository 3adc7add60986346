package sim

type tableConfig struct {
	name     string
	cfg      func() Config
	min, max float64 // corruption rate bounds of the seeds' table
	retract  bool    // retractions must happen
}

// tableConfigs are the rows of the seeds' table.
func tableConfigs() []tableConfig {
	return []tableConfig{
		{name: "baseline", cfg: DefaultConfig, min: 0.10, max: 0.25},
		{name: "fp8", cfg: func() Config { c := DefaultConfig(); c.IndexKDtype = "fp8"; return c }, max: 0.03},
		{name: "eager", cfg: func() Config { c := DefaultConfig(); c.DisableCUDAGraph = true; return c }, max: 0.03},
		{name: "no-overlap", cfg: func() Config { c := DefaultConfig(); c.MultiStreamOverlap = false; return c }, max: 0.03},
		{name: "maxbs64", cfg: func() Config { c := DefaultConfig(); c.CUDAGraphMaxBS = 64; return c }, min: 0.10, max: 0.25},
		{name: "no-overlap-smallpool", cfg: func() Config {
			c := DefaultConfig()
			c.MultiStreamOverlap = false
			c.PoolTokens = 60000
			return c
		}, max: 0.03, retract: true},
	}
}
