"""Hostile inputs: damaged files, missing files, invalid text. Every one is a Python exception
(WasmindError with the module's status, OSError, ValueError), never a crash or a raw trap, and
the module keeps working after it."""

import os
import shutil

import numpy as np
import pytest

import wasmind
from conftest import SMOLLM2, fixture

ERRORS = (wasmind.WasmindError, ValueError, OSError)


def test_missing_paths(tmp_path):
    with pytest.raises(FileNotFoundError):
        wasmind.StaticModel.from_pretrained(tmp_path / 'nothing-here')
    with pytest.raises(FileNotFoundError):
        wasmind.StaticModel.from_pretrained('minishlab/potion-base-8M')  # a hub name: local only
    (tmp_path / 'half').mkdir()
    shutil.copy(fixture('models/potion-base-8M/config.json'), tmp_path / 'half')
    with pytest.raises(FileNotFoundError):
        wasmind.StaticModel.from_pretrained(tmp_path / 'half')
    with pytest.raises(FileNotFoundError):
        wasmind.Llama(tmp_path / 'missing.gguf')


def damaged_folder(tmp_path, name, safetensors=None, config=None, tokenizer=None):
    src = fixture('models/potion-base-8M')
    d = tmp_path / name
    d.mkdir()
    for f, data in (('model.safetensors', safetensors), ('config.json', config),
                    ('tokenizer.json', tokenizer)):
        if data is None:
            shutil.copy(src / f, d / f)
        else:
            (d / f).write_bytes(data)
    return d


def test_damaged_model2vec_folders(tmp_path):
    src = fixture('models/potion-base-8M')
    st = (src / 'model.safetensors').read_bytes()
    tok = (src / 'tokenizer.json').read_bytes()
    rng = np.random.default_rng(1)
    cases = {
        'truncated-safetensors': dict(safetensors=st[:len(st) // 2]),
        'random-safetensors': dict(safetensors=rng.bytes(1 << 16)),
        'empty-safetensors': dict(safetensors=b''),
        'header-only': dict(safetensors=st[:8]),
        'config-not-json': dict(config=b'{"normalize": tru'),
        'config-wrong-type': dict(config=b'{"normalize": "yes"}'),
        'tokenizer-truncated': dict(tokenizer=tok[:len(tok) // 3]),
        'tokenizer-random': dict(tokenizer=rng.bytes(4096)),
    }
    for name, files in cases.items():
        with pytest.raises(wasmind.WasmindError) as e:
            wasmind.StaticModel.from_pretrained(damaged_folder(tmp_path, name, **files))
        assert e.value.status in ('BAD_FORMAT', 'UNSUPPORTED', 'INVALID_UTF8'), (name, e.value)
        assert e.value.message, name


def test_invalid_text():
    model = wasmind.StaticModel.from_pretrained(fixture('models/potion-base-8M'))
    with pytest.raises(wasmind.WasmindError) as e:
        model.encode(['fine', b'caf\xc3', 'also fine'])
    assert e.value.status == 'INVALID_UTF8' and '1' in e.value.message
    with pytest.raises(ValueError):  # UnicodeEncodeError: a lone surrogate
        model.encode(['fine', 'bad \ud800'])
    with pytest.raises(TypeError):
        model.encode(['fine', 3])
    assert model.encode(['still works']).shape == (1, model.dim)


def test_damaged_gguf(tmp_path):
    gguf = fixture(SMOLLM2)
    size = os.path.getsize(gguf)
    with open(gguf, 'rb') as f:
        head = f.read(1 << 20)
    rng = np.random.default_rng(2)
    cases = {
        'truncated-header.gguf': head[:100],
        'truncated-data.gguf': head,  # the tensor table says ~98 MB; 1 MiB is there
        'random.gguf': rng.bytes(1 << 16),
        'empty.gguf': b'',
        'magic-only.gguf': b'GGUF',
    }
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(wasmind.WasmindError) as e:
            wasmind.Llama(p)
        assert e.value.status in ('BAD_FORMAT', 'UNSUPPORTED'), (name, e.value)
    # A file truncated by a few bytes, streamed in: still a clean BAD_FORMAT.
    p = tmp_path / 'short.gguf'
    with open(gguf, 'rb') as f, open(p, 'wb') as out:
        shutil.copyfileobj(f, out)
        out.truncate(size - 7)
    with pytest.raises(wasmind.WasmindError) as e:
        wasmind.Llama(p)
    assert e.value.status == 'BAD_FORMAT', e.value
    with pytest.raises(wasmind.WasmindError):
        wasmind.Llama(fixture('models/potion-base-8M/model.safetensors'))


def test_bad_requests_keep_the_model_usable(smollm2):
    msgs = [{'role': 'user', 'content': 'Say hi.'}]
    for bad in (dict(response_format={'type': 'json_schema', 'json_schema': {'schema': {'type': 'strin'}}}),
                dict(grammar='root ::= ('),
                dict(response_format={'type': 'json_schema', 'json_schema': {'schema': {'not': {}}}})):
        with pytest.raises(wasmind.WasmindError) as e:
            smollm2.create_chat_completion(msgs, max_tokens=4, **bad)
        assert e.value.status in ('BAD_FORMAT', 'UNSUPPORTED'), e.value
    for bad in (dict(messages=[{'role': 'tool', 'content': 'x'}]),
                dict(messages=[{'role': 'user', 'content': 'bad \udc80'}]),
                dict(messages=[]),
                dict(messages=msgs, temperature='hot'),
                dict(messages=msgs, response_format={'type': 'xml'}),
                dict(messages=msgs, tools=[{'type': 'function'}]),
                dict(messages=msgs, frequency_penalty=0.5),
                dict(messages=msgs, mirostat_mode=2),
                dict(messages=msgs, logit_bias={15: 5.0}),
                dict(messages=msgs, made_up_option=1)):
        with pytest.raises(ValueError):
            smollm2.create_chat_completion(**bad)
    with pytest.raises(ValueError):
        smollm2.create_completion('Hi', presence_penalty=1.0)
    # The same arguments at their "off" values change nothing, so they are taken.
    smollm2.create_chat_completion(msgs, max_tokens=1, frequency_penalty=0.0, presence_penalty=0.0,
                                   mirostat_mode=0, mirostat_tau=5.0, logit_bias=None)
    with pytest.raises(wasmind.WasmindError) as e:
        smollm2.tokenize(b'caf\xc3')
    assert e.value.status == 'INVALID_UTF8'
    r = smollm2.create_chat_completion(msgs, temperature=0, max_tokens=4)
    assert r['choices'][0]['message']['content']


def test_context_full(tmp_path):
    llm = wasmind.Llama(fixture(SMOLLM2), n_ctx=16)
    with pytest.raises(wasmind.WasmindError) as e:
        llm.create_chat_completion([{'role': 'user', 'content': 'word ' * 40}], max_tokens=4)
    assert e.value.status == 'CONTEXT_FULL'
    r = llm.create_chat_completion([{'role': 'user', 'content': 'Hi'}], temperature=0, max_tokens=50)
    assert r['choices'][0]['finish_reason'] == 'length'


def test_abandoned_stream_then_new_reply(smollm2):
    msgs = [{'role': 'user', 'content': 'What is the capital of France?'}]
    it = smollm2.create_chat_completion(msgs, stream=True, temperature=0, max_tokens=12)
    next(it), next(it)
    del it
    r = smollm2.create_chat_completion(msgs, temperature=0, repeat_penalty=1.0, max_tokens=12)
    assert 'Paris' in r['choices'][0]['message']['content']


def test_arguments_that_would_change_the_result_are_refused():
    with pytest.raises(ValueError):
        wasmind.Llama(fixture(SMOLLM2), chat_format='llama-2')
    with pytest.raises(ValueError):
        wasmind.StaticModel.from_pretrained(fixture('models/potion-base-8M'), dimensionality=64)
    m = wasmind.StaticModel.from_pretrained(fixture('models/potion-base-8M'), token='x')
    with pytest.raises(ValueError):
        m.encode(['a'], made_up_option=True)
    assert m.encode(['a'], use_multiprocessing=False).shape == (1, m.dim)
