"""wasmind for Python: the wasmind WebAssembly module on wasmtime.

- `StaticModel.from_pretrained(folder).encode(sentences)`: model2vec's StaticModel on local
  Model2Vec folders.
- `Llama(model_path, n_ctx=...)`: llama-cpp-python's `create_chat_completion`, `tokenize`,
  `create_completion`, and (with `embedding=True`, a BERT GGUF) `embed`.
"""

from ._runtime import STATUS, Runtime, WasmindError, has_relaxed_simd, modules_dir
from .llama import Llama
from .static_model import StaticModel

__all__ = ['Llama', 'Runtime', 'STATUS', 'StaticModel', 'WasmindError', 'has_relaxed_simd',
           'modules_dir']
__version__ = '0.1.0'
