"""`Llama`: llama-cpp-python's class of the same name on wasmind (chat completions in the
OpenAI shape, tokenize/detokenize, completions, and BERT sentence embeddings)."""

import json
import math
import os
import struct
import time
import uuid

from ._args import SAMPLING_IGNORED, SAMPLING_OFF, refuse_unsupported
from ._runtime import (E_CONTEXT_FULL, E_END, E_NO_MODEL, E_STOPPED, MiB, Runtime, WasmindError,
                       _i32, _u32)

# llama-cpp-python's load arguments that cannot change a result here (devices, batching, memory
# mapping, logging).
LOAD_IGNORED = ('n_gpu_layers', 'main_gpu', 'tensor_split', 'split_mode', 'n_batch', 'n_ubatch',
                'use_mmap', 'use_mlock', 'offload_kqv', 'flash_attn', 'numa', 'logits_all',
                'last_n_tokens_size', 'n_threads_batch', 'verbose')

ROLES = {'system': 0, 'developer': 0, 'user': 1, 'assistant': 2}
ROLE_RAW = 3
TOKENIZE_ADD_SPECIAL, TOKENIZE_PARSE_SPECIAL, DETOKENIZE_SPECIAL = 1, 2, 1
GRAMMAR_NONE, GRAMMAR_GBNF, GRAMMAR_JSON_SCHEMA, GRAMMAR_JSON_OBJECT = 0, 1, 2, 3
# chat_stats().state -> OpenAI finish_reason
FINISH = {'eog': 'stop', 'limit': 'length', 'context_full': 'length', 'stopped': 'stop'}


def _now_ms():
    return time.monotonic() * 1000.0


def _content(message, i):
    """A message's text: a str, None (''), or OpenAI text parts joined."""
    if not isinstance(message, dict):
        raise ValueError(f'message {i} is {type(message).__name__}, not a dict')
    c = message.get('content')
    if c is None:
        return ''
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        texts = []
        for part in c:
            if isinstance(part, dict) and part.get('type') == 'text' and isinstance(part.get('text'), str):
                texts.append(part['text'])
            else:
                raise ValueError(f'message {i}: only text parts are supported, not {part!r:.60}')
        return ''.join(texts)
    raise ValueError(f'message {i}: content is {type(c).__name__}, not str')


def _grammar(response_format, grammar):
    """(kind, text) for chat_set_grammar from llama-cpp-python's response_format / grammar."""
    if grammar is not None:
        text = grammar if isinstance(grammar, str) else getattr(grammar, '_grammar', None)
        if not isinstance(text, str):
            raise ValueError('grammar must be GBNF text (a str)')
        return GRAMMAR_GBNF, text
    if response_format is None:
        return GRAMMAR_NONE, ''
    if not isinstance(response_format, dict):
        raise ValueError(f'response_format must be a dict, not {type(response_format).__name__}')
    kind = response_format.get('type')
    schema = response_format.get('schema')
    if kind == 'json_schema' and schema is None:
        schema = (response_format.get('json_schema') or {}).get('schema')
    if kind == 'text':
        return GRAMMAR_NONE, ''
    if kind in ('json_object', 'json_schema'):
        if schema is None:
            if kind == 'json_schema':
                raise ValueError('response_format json_schema needs json_schema.schema')
            return GRAMMAR_JSON_OBJECT, ''
        return GRAMMAR_JSON_SCHEMA, schema if isinstance(schema, str) else json.dumps(schema)
    raise ValueError(f'response_format type {kind!r}: supported are text, json_object, json_schema')


def _drain(gen):
    """Runs a reply generator (`Llama._generate`) to its end; returns what it returns (finish
    reason, prompt tokens, reply tokens, the reply's text)."""
    while True:
        try:
            next(gen)
        except StopIteration as done:
            return done.value


class _StopMatcher:
    """Host-side stop strings: holds back the text that could still start one."""

    def __init__(self, stop):
        if stop is None:
            stop = []
        elif isinstance(stop, str):
            stop = [stop]
        self.stop = [s for s in stop if s]
        self.pending = ''

    def feed(self, piece):
        """(text safe to emit, hit a stop string)."""
        if not self.stop:
            return piece, False
        self.pending += piece
        cut = min((self.pending.find(s) for s in self.stop if s in self.pending), default=-1)
        if cut >= 0:
            out, self.pending = self.pending[:cut], ''
            return out, True
        hold = 0
        for s in self.stop:
            for k in range(min(len(s) - 1, len(self.pending)), 0, -1):
                if self.pending.endswith(s[:k]):
                    hold = max(hold, k)
                    break
        out = self.pending[:len(self.pending) - hold]
        self.pending = self.pending[len(self.pending) - hold:]
        return out, False

    def flush(self):
        out, self.pending = self.pending, ''
        return out


class Llama:
    """A GGUF model in its own wasmind module.

    `n_ctx`: KV cache tokens (0: the model's, at most 4096; default 512 as llama-cpp-python).
    `n_threads`: 1 runs the single-threaded module; more, the threaded one with n_threads - 1
    helper threads (results are bit-identical for any count). `seed`: the sampler's seed
    (None: the module's default, 0; -1: random). `embedding=True` loads the file as a BERT
    sentence encoder (all-MiniLM, bge, e5, gte) for `embed`/`create_embedding` instead.
    Use one Llama from one thread at a time."""

    def __init__(self, model_path, n_ctx=512, n_threads=1, seed=None, embedding=False,
                 relaxed=None, verbose=False, **kwargs):
        refuse_unsupported('Llama', kwargs, LOAD_IGNORED,
                           {'chat_format': None, 'rope_freq_base': 0.0, 'rope_freq_scale': 0.0,
                            'lora_path': None, 'vocab_only': False})
        self.model_path = os.fspath(model_path)
        if not os.path.isfile(self.model_path):
            raise FileNotFoundError(f'{self.model_path}: no such model file')
        if not isinstance(n_ctx, int) or not 0 <= n_ctx < 1 << 31:
            raise ValueError(f'n_ctx must be an integer >= 0, not {n_ctx!r}')
        size = os.path.getsize(self.model_path)
        self._rt = Runtime(threads=n_threads or 1, relaxed=relaxed,
                           max_memory=math.ceil(size * 1.3) + 256 * MiB)
        self.embedding = bool(embedding)
        self._seed = int.from_bytes(os.urandom(4), 'little') if seed == -1 else seed
        self._sampler = None  # the settings last given to sampler_set
        self._history = None  # messages the module holds, its last reply included
        self._busy = False  # a streamed reply was left unfinished
        rt = self._rt
        ptr, size = rt.load_file_block(self.model_path)
        if self.embedding:
            # the module owns the block from here, whether the load succeeds or not
            self.embed_dim = rt.call_checked('load_embedder', ptr, size, 0, 0, 0, 0)
            self.metadata = json.loads(rt.result_text(rt.call('embedder_info')))
        else:
            try:
                rt.call_checked('set_context', n_ctx)
            except BaseException:
                rt.free(ptr, size)
                raise
            rt.call_checked('load_model', ptr, size)
            self.metadata = json.loads(rt.result_text(rt.call('model_info')))
        self._defaults = json.loads(rt.result_text(rt.call('sampler_defaults')))

    # -- tokenizer ---------------------------------------------------------------------------

    def n_ctx(self):
        return self.metadata.get('context', 0)

    def n_vocab(self):
        return self.metadata.get('n_vocab', 0)

    def token_bos(self):
        return self.metadata.get('bos', -1)

    def token_eos(self):
        return self.metadata.get('eos', -1)

    def tokenize(self, text, add_bos=True, special=False):
        """Token ids of `text` (bytes; a str is UTF-8 encoded). `add_bos`: BOS/EOS as the model's
        metadata says; `special`: control tokens written in the text become their ids."""
        if isinstance(text, str):
            text = text.encode('utf-8')
        text = bytes(text)
        flags = (TOKENIZE_ADD_SPECIAL if add_bos else 0) | (TOKENIZE_PARSE_SPECIAL if special else 0)
        rt = self._rt
        cap = len(text) + 8
        p = rt.put(text)
        try:
            while True:
                out = rt.alloc(4 * cap)
                try:
                    n = rt.call_checked('tokenize', p, len(text), flags, out, cap)
                    if n <= cap:
                        raw = rt.read(out, 4 * n)
                        return [int.from_bytes(raw[k:k + 4], 'little') for k in range(0, 4 * n, 4)]
                finally:
                    rt.free(out, 4 * cap)
                cap = n
        finally:
            rt.free(p, len(text))

    def detokenize(self, tokens, special=False):
        """The bytes of `tokens` (control tokens rendered when `special`)."""
        rt = self._rt
        data = b''.join(int(t).to_bytes(4, 'little') for t in tokens)
        p = rt.put(data)
        try:
            n = rt.call_checked('detokenize', p, len(tokens), DETOKENIZE_SPECIAL if special else 0)
            return rt.read(_u32(rt.call('result_ptr')), n)
        finally:
            rt.free(p, len(data))

    def chat_tokens(self):
        """(wasmind) The ids in the KV cache: the conversation as run so far, the last reply
        included but not its end-of-generation token (`chat_last_token` is that one)."""
        rt = self._rt
        n = rt.call_checked('chat_tokens', 0, 0)
        out = rt.alloc(4 * n)
        try:
            rt.call_checked('chat_tokens', out, n)
            return list(struct.unpack(f'<{n}I', rt.read(out, 4 * n)))
        finally:
            rt.free(out, 4 * n)

    def chat_last_token(self):
        """(wasmind) The id the last reply sampled last (its end token included), or None."""
        t = self._rt.call('chat_last_token')
        return None if t < 0 else t

    # -- generation --------------------------------------------------------------------------

    def _set_sampler(self, temperature, top_k, top_p, min_p, repeat_penalty, seed):
        d = self._defaults
        for name, v in (('temperature', temperature), ('top_p', top_p), ('min_p', min_p),
                        ('repeat_penalty', repeat_penalty)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise ValueError(f'{name} must be a number, not {v!r}')
        for name, v, hi in (('top_k', top_k, 2 ** 31 - 1), ('seed', seed, 2 ** 32 - 1)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= hi):
                raise ValueError(f'{name} must be an integer from 0 to {hi}, not {v!r}')
        s = (float(d['temperature'] if temperature is None else temperature),
             int(d['top_k'] if top_k is None else top_k),
             float(d['top_p'] if top_p is None else top_p),
             float(d['min_p'] if min_p is None else min_p),
             float(d['repeat_penalty'] if repeat_penalty is None else repeat_penalty),
             int(d['repeat_window']),
             int(seed if seed is not None else self._seed if self._seed is not None else d['seed']))
        # Set only on a change (or an explicit seed): the RNG continues across replies.
        if s != self._sampler or seed is not None:
            self._rt.call_checked('sampler_set', s[0], s[1], s[2], s[3], s[4], s[5], _i32(s[6]))
            self._sampler = s

    def _add(self, role, text):
        b = text.encode('utf-8')
        p = self._rt.put(b)
        try:
            self._rt.call_checked('chat_add', role, p, len(b))
        finally:
            self._rt.free(p, len(b))

    def _generate(self, turns, max_tokens, stop, grammar, reuse):
        """Runs a reply to `turns` ([(role, text)]); yields text pieces, returns
        (finish_reason, prompt_tokens, completion_tokens, text). With `reuse`, a conversation
        that extends the one the module holds (its last reply as written) runs only its new
        messages."""
        rt = self._rt
        if max_tokens is None or max_tokens < 0:
            max_tokens = 0
        if not isinstance(max_tokens, int) or max_tokens >= 1 << 31:
            raise ValueError(f'max_tokens must be an integer, not {max_tokens!r}')
        h = self._history
        if reuse and not self._busy and h is not None and len(turns) > len(h) and turns[:len(h)] == h:
            new = turns[len(h):]
        else:
            rt.call_checked('chat_reset')
            new = turns
        self._history = None
        for role, text in new:
            self._add(role, text)
        kind, gtext = grammar
        gb = gtext.encode('utf-8')
        gp = rt.put(gb)
        try:
            rt.call_checked('chat_set_grammar', kind, gp, len(gb))
        finally:
            rt.free(gp, len(gb))
        rt.call_checked('chat_start', max_tokens, _now_ms())
        prompt_tokens = rt.call('kv_len')
        self._busy = True
        matcher = _StopMatcher(stop)
        text, stopped = [], False
        while True:
            n = rt.call('chat_next', _now_ms())
            if n in (-E_END, -E_STOPPED, -E_CONTEXT_FULL):
                break
            piece = rt.result_text(n)
            out, hit = matcher.feed(piece)
            if out:
                text.append(out)
                yield out
            if hit:
                stopped = True
                rt.call('request_stop')
        tail = matcher.flush() if not stopped else ''
        if tail:
            text.append(tail)
            yield tail
        stats = json.loads(rt.result_text(rt.call('chat_stats')))
        self._busy = False
        finish = 'stop' if stopped else FINISH.get(stats.get('state'), 'stop')
        reply = ''.join(text)
        if stats.get('state') == 'eog' and not stopped:
            self._history = turns + [(ROLES['assistant'], reply)]
        return finish, prompt_tokens, stats.get('tokens', 0), reply

    @staticmethod
    def _turns(messages):
        if not isinstance(messages, (list, tuple)) or not messages:
            raise ValueError('messages must be a non-empty list of {"role", "content"} dicts')
        turns = []
        for i, m in enumerate(messages):
            role = m.get('role') if isinstance(m, dict) else None
            if role not in ROLES:
                raise ValueError(f'message {i}: role {role!r} is not one of {", ".join(ROLES)}')
            turns.append((ROLES[role], _content(m, i)))
        return turns

    def create_chat_completion(self, messages, temperature=None, top_p=None, top_k=None,
                               min_p=None, stream=False, stop=None, seed=None,
                               response_format=None, max_tokens=None, repeat_penalty=None,
                               grammar=None, model=None, **kwargs):
        """An OpenAI-shaped chat completion (a dict), or with `stream=True` an iterator of
        `chat.completion.chunk` dicts. Sampling settings not given are the module's defaults
        (temperature 0.2, top_k 40, top_p 0.95, min_p 0.05, repeat_penalty 1.1); temperature 0
        is greedy. `response_format`: {"type": "json_object"} (with an optional "schema"), or
        {"type": "json_schema", "json_schema": {"schema": {...}}}; `grammar`: GBNF text. A
        conversation that continues the previous one (its reply as returned) runs only the new
        messages. Other llama-cpp-python arguments (tools, logprobs, ...) are not supported and
        raise ValueError when given a value."""
        refuse_unsupported('create_chat_completion', kwargs, SAMPLING_IGNORED, SAMPLING_OFF)
        turns = self._turns(messages)
        if self._busy:
            self._rt.call_checked('chat_reset')
            self._busy = False
        self._set_sampler(temperature, top_k, top_p, min_p, repeat_penalty, seed)
        gen = self._generate(turns, max_tokens, stop, _grammar(response_format, grammar), True)
        ident, created, name = f'chatcmpl-{uuid.uuid4().hex}', int(time.time()), model or self.model_path
        if stream:
            return self._chat_chunks(gen, ident, created, name)
        finish, prompt, completion, reply = _drain(gen)
        return {
            'id': ident, 'object': 'chat.completion', 'created': created, 'model': name,
            'choices': [{'index': 0, 'message': {'role': 'assistant', 'content': reply},
                         'logprobs': None, 'finish_reason': finish}],
            'usage': {'prompt_tokens': prompt, 'completion_tokens': completion,
                      'total_tokens': prompt + completion},
        }

    @staticmethod
    def _chat_chunks(gen, ident, created, name):
        def chunk(delta, finish=None):
            return {'id': ident, 'object': 'chat.completion.chunk', 'created': created, 'model': name,
                    'choices': [{'index': 0, 'delta': delta, 'logprobs': None, 'finish_reason': finish}]}
        # The first piece runs the prompt, so errors (CONTEXT_FULL, a bad grammar) raise on the
        # first next(), before the role chunk, as llama-cpp-python's do.
        try:
            first = next(gen)
        except StopIteration as done:
            yield chunk({'role': 'assistant'})
            yield chunk({}, done.value[0])
            return
        yield chunk({'role': 'assistant'})
        yield chunk({'content': first})
        while True:
            try:
                piece = next(gen)
            except StopIteration as done:
                yield chunk({}, done.value[0])
                return
            yield chunk({'content': piece})

    def create_completion(self, prompt, max_tokens=16, temperature=None, top_p=None, top_k=None,
                          min_p=None, stream=False, stop=None, seed=None, repeat_penalty=None,
                          grammar=None, model=None, **kwargs):
        """A text completion of `prompt` (fed as it is, no chat markup), OpenAI-shaped
        (`text_completion`, or chunks with stream=True). Arguments wasmind does not implement
        raise ValueError when given a value that would change the result."""
        refuse_unsupported('create_completion', kwargs, SAMPLING_IGNORED,
                           {**SAMPLING_OFF, 'echo': False, 'suffix': None})
        if not isinstance(prompt, str):
            raise ValueError('prompt must be a str')
        if self._busy:
            self._rt.call_checked('chat_reset')
            self._busy = False
        self._set_sampler(temperature, top_k, top_p, min_p, repeat_penalty, seed)
        gen = self._generate([(ROLE_RAW, prompt)], max_tokens, stop, _grammar(None, grammar), False)
        ident, created, name = f'cmpl-{uuid.uuid4().hex}', int(time.time()), model or self.model_path

        def shape(text, finish, usage=None):
            d = {'id': ident, 'object': 'text_completion', 'created': created, 'model': name,
                 'choices': [{'text': text, 'index': 0, 'logprobs': None, 'finish_reason': finish}]}
            if usage:
                d['usage'] = usage
            return d

        if stream:
            def chunks():
                while True:
                    try:
                        piece = next(gen)
                    except StopIteration as done:
                        yield shape('', done.value[0])
                        return
                    yield shape(piece, None)
            return chunks()
        finish, p, c, reply = _drain(gen)
        return shape(reply, finish, {'prompt_tokens': p, 'completion_tokens': c, 'total_tokens': p + c})

    __call__ = create_completion

    # -- embeddings --------------------------------------------------------------------------

    def embed(self, input, normalize=True, truncate=True):
        """Sentence vectors (list of floats; a list of them for a list of str) from a BERT GGUF
        loaded with embedding=True. Vectors are at unit length (the module's); texts longer
        than the model's context are cut (keeping [SEP])."""
        if not self.embedding:
            raise WasmindError(E_NO_MODEL, 'load the model with Llama(path, embedding=True) to embed')
        single = isinstance(input, str)
        texts = [input] if single else list(input)
        rt, dim = self._rt, self.embed_dim
        out = rt.alloc(4 * dim)
        vecs = []
        try:
            for i, t in enumerate(texts):
                if not isinstance(t, str):
                    raise TypeError(f'input {i} is {type(t).__name__}, not str')
                b = t.encode('utf-8')
                p = rt.put(b)
                try:
                    rt.call_checked('embed', p, len(b), out)
                finally:
                    rt.free(p, len(b))
                raw = rt.read(out, 4 * dim)
                vecs.append(list(struct.unpack(f'<{dim}f', raw)))
        finally:
            rt.free(out, 4 * dim)
        return vecs[0] if single else vecs

    def create_embedding(self, input, model=None):
        """OpenAI-shaped embeddings: {"object": "list", "data": [...], "model", "usage"}."""
        single = isinstance(input, str)
        texts = [input] if single else list(input)
        vecs = self.embed(texts)
        return {'object': 'list', 'model': model or self.model_path,
                'data': [{'object': 'embedding', 'embedding': v, 'index': i} for i, v in enumerate(vecs)],
                'usage': {'prompt_tokens': 0, 'total_tokens': 0}}

    def close(self):
        """Releases the helper threads; the model stays usable on this thread alone."""
        self._rt.close()
