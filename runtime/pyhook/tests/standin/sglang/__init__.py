"""Stand-in of SGLang's interfaces for kvcanary's tests (torch on CPU, no GPU).

Not SGLang: a small package with SGLang's module paths, class names, method
signatures and plugin framework as described in kvcanary's SGLang hooks
reference (notes read from SGLang's source, main, 2026-08 to 2026-12), driving
a tiny deterministic DSA-like engine (see ../engine.py and ../README.md). Tests
put tests/standin on sys.path.
"""

__version__ = "0.5.99+standin"
