"""kvcanary's SGLang binding.

- targets.py: the one table of hook targets and their resolution;
- hooks.py: the hook callables (BEFORE/AFTER/AROUND) both routes apply;
- plugin.py: `load()`, the entry point of group `sglang.srt.plugins`;
- finder.py: the sys.meta_path finder of the sitecustomize route;
- instruments/: room checksum, replay canary, graph vs eager;
- `python3 -m kvcanary.sglang check [--json]`: which targets resolve.
"""
