"""`StaticModel`: model2vec's class of the same name on wasmind, for local Model2Vec folders
(model.safetensors, tokenizer.json, config.json)."""

import json
import math
import os
from pathlib import Path

import numpy as np

from ._args import refuse_unsupported
from ._progress import Progress
from ._runtime import E_INVALID_ARGUMENT, MiB, Runtime, WasmindError

_UNSET = object()


class StaticModel:
    """A Model2Vec model loaded into its own wasmind module. Build it with `from_pretrained`."""

    def __init__(self, runtime, dim, config, path):
        self._rt = runtime
        self.dim = dim
        self.config = config
        self.path = path
        self.normalize = bool(config.get('normalize') or False)
        self.max_length = config.get('max_length', 512)

    @property
    def embedding_dim(self):
        return self.dim

    @classmethod
    def from_pretrained(cls, path, normalize=None, max_length=_UNSET, n_threads=1, relaxed=None,
                        **kwargs):
        """Loads the Model2Vec folder `path` (local only; a hub name that is not a folder is an
        OSError). `normalize` and `max_length` override config.json's, as in model2vec 0.10.
        `n_threads` > 1 runs the threaded module with n_threads - 1 helper threads (vectors are
        bit-identical for any thread count). model2vec's download arguments (token, subfolder,
        force_download) are accepted and ignored; `quantize_to` and `dimensionality` are refused
        (they would change the vectors)."""
        refuse_unsupported('from_pretrained', kwargs, ('token', 'subfolder', 'force_download'),
                           {'quantize_to': None, 'dimensionality': None})
        folder = Path(os.fspath(path))
        if not folder.is_dir():
            raise FileNotFoundError(f'{folder}: not a folder (wasmind loads local Model2Vec '
                                    'folders: model.safetensors, tokenizer.json, config.json)')
        files = {n: folder / n for n in ('model.safetensors', 'tokenizer.json', 'config.json')}
        for name, p in files.items():
            if not p.is_file():
                raise FileNotFoundError(f'{p}: missing ({name} of a Model2Vec folder)')
        tokenizer = files['tokenizer.json'].read_bytes()
        config_bytes = files['config.json'].read_bytes()
        try:
            config = json.loads(config_bytes)
        except (ValueError, UnicodeDecodeError) as e:
            raise WasmindError(3, f'{files["config.json"]}: not JSON ({e})') from None
        if not isinstance(config, dict):
            raise WasmindError(3, f'{files["config.json"]}: not a JSON object')
        if normalize is not None or max_length is not _UNSET:
            if normalize is not None:
                config['normalize'] = bool(normalize)
            if max_length is not _UNSET:
                config['max_length'] = max_length
            config_bytes = json.dumps(config).encode()
        size = files['model.safetensors'].stat().st_size
        rt = Runtime(threads=n_threads, relaxed=relaxed,
                     max_memory=math.ceil((size + len(tokenizer)) * 1.5) + 256 * MiB)
        ptr, size = rt.load_file_block(files['model.safetensors'])
        tok = cfg = 0
        try:
            tok = rt.put(tokenizer)
            cfg = rt.put(config_bytes)
            # load_embedder owns the safetensors block from now on, failed or not.
            dim = rt.call_checked('load_embedder', ptr, size, tok, len(tokenizer),
                                  cfg, len(config_bytes))
        finally:
            if tok:
                rt.free(tok, len(tokenizer))
            if cfg:
                rt.free(cfg, len(config_bytes))
        return cls(rt, dim, config, str(folder))

    def info(self):
        """The module's embedder_info JSON: kind, dim."""
        return json.loads(self._rt.result_text(self._rt.call('embedder_info')))

    def encode(self, sentences, show_progress_bar=False, max_length=_UNSET, normalize=None,
               batch_size=1024, **kwargs):
        """Vectors for `sentences` (a list of str, or one str): float32 ndarray (n, dim), or
        (dim,) for one str. Texts go to the module `batch_size` at a time (embed_batch).
        `max_length`/`normalize` other than the model's are refused (load the model with them:
        from_pretrained(path, max_length=..., normalize=...)). A str with lone surrogates is a
        UnicodeEncodeError (ValueError); bytes that are not UTF-8 are WasmindError
        INVALID_UTF8. model2vec's multiprocessing arguments are accepted and ignored."""
        refuse_unsupported('encode', kwargs, ('use_multiprocessing', 'multiprocessing_threshold'))
        if max_length is not _UNSET and max_length != self.max_length:
            raise ValueError(f'max_length {max_length!r}: this model was loaded with '
                             f'{self.max_length!r}; pass it to from_pretrained instead')
        if normalize is not None and bool(normalize) != self.normalize:
            raise ValueError(f'normalize {normalize!r}: this model was loaded with '
                             f'{self.normalize!r}; pass it to from_pretrained instead')
        single = isinstance(sentences, (str, bytes))
        if single:
            sentences = [sentences]
        sentences = list(sentences)
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f'batch_size must be a positive integer, not {batch_size!r}')
        out = np.empty((len(sentences), self.dim), dtype=np.float32)
        with Progress(len(sentences), 'Encoding', enabled=show_progress_bar) as bar:
            for start in range(0, len(sentences), batch_size):
                batch = sentences[start:start + batch_size]
                self._encode_batch(batch, out[start:start + len(batch)], start)
                bar.update(len(batch))
        return out[0] if single else out

    def _encode_batch(self, texts, out, first):
        parts = []
        for i, t in enumerate(texts):
            if isinstance(t, str):
                parts.append(t.encode('utf-8'))  # lone surrogates: UnicodeEncodeError
            elif isinstance(t, (bytes, bytearray, memoryview)):
                parts.append(bytes(t))
            else:
                raise TypeError(f'sentence {first + i} is {type(t).__name__}, not str')
        offsets = np.zeros(len(parts) + 1, dtype='<u4')
        np.cumsum([len(p) for p in parts], out=offsets[1:])
        if int(offsets[-1]) != sum(len(p) for p in parts):  # u32 overflow
            raise WasmindError(E_INVALID_ARGUMENT, 'a batch over 4 GiB of text: lower batch_size')
        rt = self._rt
        joined = b''.join(parts)
        n_out = len(parts) * self.dim * 4
        t = o = v = 0
        try:
            t = rt.put(joined)
            o = rt.put(offsets.tobytes())
            v = rt.alloc(n_out)
            rc = rt.call('embed_batch', t, o, len(parts), v)
            if rc < 0:
                msg = rt.last_error()
                if first:
                    msg += f' (in the batch that starts at sentence {first})'
                raise WasmindError(-rc, msg)
            out[:] = np.frombuffer(rt.read(v, n_out), dtype='<f4').reshape(len(parts), self.dim)
        finally:
            if t:
                rt.free(t, len(joined))
            if o:
                rt.free(o, offsets.nbytes)
            if v:
                rt.free(v, n_out)

    def close(self):
        """Releases the helper threads (the threaded module); the model stays usable alone."""
        self._rt.close()
