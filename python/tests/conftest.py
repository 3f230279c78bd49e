"""Fixtures of the Python tests: the repository's test files (`cargo xtask fixtures` makes them)
in $WASMIND_FIXTURES, else <repo>/target/fixtures, as host-tests/tests/common/mod.rs and
glue/test/reference.mjs find them. The modules: the installed package's, or $WASMIND_DIST."""

import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(os.environ.get('WASMIND_FIXTURES') or REPO / 'target' / 'fixtures')
SMOLLM2 = 'models/SmolLM2-135M-Instruct.Q4_1.gguf'
MINILM = 'models/all-MiniLM-L6-v2-F16.gguf'
MIN_COSINE = 0.99999  # as host-tests/tests/embed.rs
DECISIVE = 0.5  # glue/test/reference.mjs: llama.cpp's top two logits at least this far apart
REPLY_TOKENS = 12


def skipped(what, why):
    """A skip that is never silent: a line in $WASMIND_SKIP_LOG too (as the Rust tests)."""
    log = os.environ.get('WASMIND_SKIP_LOG')
    if log:
        with open(log, 'a') as f:
            f.write(f'{what}: {why}\n')
    pytest.skip(f'{what}: {why}')


def fixture(path):
    """A fixture's path; a missing one fails the test naming it (as the Rust and Node tests)."""
    p = FIXTURES / path
    if not p.exists():
        pytest.fail(f'test fixture {p} is missing: run `cargo xtask fixtures` (cargo xtask test runs it '
                    'first; or set WASMIND_FIXTURES)')
    return p


def reference(name):
    return json.loads(fixture(f'reference/{name}').read_text())


def cosine(v, e):
    """Cosine of two vectors (1 when both are zero), in float64."""
    import numpy as np
    v, e = np.asarray(v, dtype=np.float64), np.asarray(e, dtype=np.float64)
    nv, ne = float(v @ v), float(e @ e)
    if nv == 0 and ne == 0:
        return 1.0
    return float(v @ e) / (nv * ne) ** 0.5


@pytest.fixture(scope='session')
def smollm2():
    import wasmind
    return wasmind.Llama(fixture(SMOLLM2), n_ctx=1024)
