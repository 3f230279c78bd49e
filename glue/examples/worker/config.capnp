# workerd's configuration for the wasmind Worker example (README.md here). From the repository
# root, with the models in models/ (python3 models/fetch.py, and potion-base-8M with
# python3 models/fetch.py --model potion-base-8m):
#
#   npx workerd serve glue/examples/worker/config.capnp
#   curl -d '{"input": "a sentence"}' http://127.0.0.1:8787/embed
#
# `--socket-addr http=HOST:PORT` serves elsewhere, `--directory-path models=DIR` reads the models
# from another folder.
using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
    # /embed in its own isolate; /chat handed to the next one (each isolate has 128 MB).
    (name = "wasmind", worker = (
      modules = .modules,
      compatibilityDate = "2025-09-01",
      bindings = [
        (name = "MODELS", service = "models"),
        (name = "CHAT", service = "wasmind-chat"),
        (name = "EMBED_MODEL", text = "potion-base-8M/"),
      ],
    )),
    (name = "wasmind-chat", worker = (
      modules = .modules,
      compatibilityDate = "2025-09-01",
      bindings = [
        (name = "MODELS", service = "models"),
        (name = "CHAT_MODEL", text = "SmolLM2-135M-Instruct.Q4_1.gguf"),
        (name = "CONTEXT", text = "512"),
      ],
    )),
    # The model files, as a Worker would get them from another service (in production: an
    # origin, another Worker, or an R2 bucket read with env.BUCKET.get(key)). Relative to the
    # directory workerd runs in.
    (name = "models", disk = (path = "models")),
  ],
  sockets = [(name = "http", address = "127.0.0.1:8787", http = (), service = "wasmind")],
);

# The Worker's modules, named by their paths in the repository so that worker.js's relative
# imports resolve as they do on disk (and in a bundler): the single-threaded SIMD128 module is
# imported as a compiled wasm module, which is how a Worker gets wasm.
const modules :List(Workerd.Worker.Module) = [
  (name = "glue/examples/worker/worker.js", esModule = embed "worker.js"),
  (name = "glue/wasmind.js", esModule = embed "../../wasmind.js"),
  (name = "glue/source.js", esModule = embed "../../source.js"),
  (name = "dist/wasmind.wasm", wasm = embed "../../../dist/wasmind.wasm"),
];
