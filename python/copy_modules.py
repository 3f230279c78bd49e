"""Copies the built modules (dist/wasmind*.wasm, made by `cargo xtask dist`) into
python/wasmind/modules/, where the wheel picks them up as package data.

    python python/copy_modules.py [DIST]     # DIST: default <repo>/dist
    pip wheel --no-deps -w python/dist python/   # or: pip install python/
"""

import shutil
import sys
from pathlib import Path

NAMES = ('wasmind.wasm', 'wasmind-mt.wasm', 'wasmind-relaxed.wasm', 'wasmind-relaxed-mt.wasm')


def main():
    here = Path(__file__).resolve().parent
    dist = Path(sys.argv[1]) if len(sys.argv) > 1 else here.parent / 'dist'
    target = here / 'wasmind' / 'modules'
    target.mkdir(exist_ok=True)
    missing = [n for n in NAMES if not (dist / n).is_file()]
    if missing:
        sys.exit(f'{dist}: missing {", ".join(missing)}; build them with `cargo xtask dist`')
    for n in NAMES:
        shutil.copyfile(dist / n, target / n)
        print(f'{dist / n} -> {target / n}')


if __name__ == '__main__':
    main()
