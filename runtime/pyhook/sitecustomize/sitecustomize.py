"""kvcanary's sitecustomize (put on PYTHONPATH by `kvcanary wrap`).

Every interpreter started with this directory on PYTHONPATH, including the
scheduler processes SGLang spawns, runs it at start-up. When KVCANARY_ADDR is
set it installs kvcanary's import hook, which patches SGLang's hook targets as
their modules are imported. The binding fills this in.
"""
