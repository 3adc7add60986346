// Package runconfig names the engine settings of a run (hook.RunConfig) the
// way every part of kvcanary reads them: which settings are known and their
// text (KnownSettings, SettingText, UnknownSettings), how SGLang's server
// args map onto them (ServerFields, ServerMapped, ServerArgCompared), their
// provenance (SetProv, ProvOf), how the settings an engine reports from
// inside merge into a run's (EngineMerge, Contradiction), and the
// RunConfig.Extra keys that describe the client's workload rather than an
// engine flag (WorkloadExtraPrefix).
//
// It is a spec leaf: the repro harness records settings with it, the
// sessions analyzer compares two runs' settings with it, and neither imports
// the other. It imports only runtime/hook. Nothing here fails or panics.
package runconfig
