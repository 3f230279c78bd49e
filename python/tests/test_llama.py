"""Llama against llama.cpp (SmolLM2-135M-Instruct Q4_1): prompt ids, greedy replies while
llama.cpp is decisive, tokenization of the corpus; the OpenAI shapes, streaming, grammars,
stop strings, multi-turn reuse, threads; BERT embeddings (all-MiniLM-L6-v2)."""

import json

import numpy as np
import pytest

import wasmind
from conftest import (DECISIVE, MIN_COSINE, MINILM, REPLY_TOKENS, REPO, SMOLLM2, cosine, fixture,
                      reference)

GREEDY = dict(temperature=0, repeat_penalty=1.0, max_tokens=REPLY_TOKENS)


def messages_of(chat):
    return ([{'role': 'system', 'content': chat['system']}] if chat['system'] is not None else []) + \
        [{'role': 'user', 'content': chat['user']}]


def compare_greedy(llm, chat, result):
    """glue/test/reference.mjs compareGreedy: the prompt ids equal llama.cpp's; the reply's
    tokens equal llama.cpp's up to the first step where its top two logits are < 0.5 apart."""
    ids = llm.chat_tokens()
    n = len(chat['prompt_ids'])
    assert ids[:n] == chat['prompt_ids'], f"{chat['user']}: prompt ids"
    reply = ids[n:]
    finish = result['choices'][0]['finish_reason']
    if finish == 'stop':
        reply.append(llm.chat_last_token())
    compared = 0
    for i, step in enumerate(chat['steps'][:len(reply)]):
        a, b = step['logits'][:2]
        if a - b < DECISIVE:
            break
        assert reply[i] == chat['ids'][i], f"{chat['user']}: token {i}"
        compared += 1
    text = result['choices'][0]['message']['content']
    if all(i < len(chat['ids']) and x == chat['ids'][i] for i, x in enumerate(reply)):
        assert chat['text'].startswith(text), f'{text!r} vs {chat["text"]!r}'
    return compared


def test_prompt_ids_equal_llama_cpp(smollm2):
    for chat in reference('smollm2-q4_1.json')['greedy']:
        assert smollm2.tokenize(chat['prompt'].encode(), special=True) == chat['prompt_ids']


def test_tokenize_corpus_equals_llama_cpp(smollm2):
    for r in reference('smollm2-q4_1.json')['tokenize']:
        ids = smollm2.tokenize(r['text'].encode(), add_bos=False)
        assert ids == r['ids'], r['text'][:60]
        assert smollm2.detokenize(ids) == r['text'].encode()


@pytest.mark.parametrize('threads', [1, 2])
def test_greedy_replies_follow_llama_cpp(threads):
    llm = wasmind.Llama(fixture(SMOLLM2), n_ctx=1024, n_threads=threads)
    compared = 0
    try:
        for chat in reference('smollm2-q4_1.json')['greedy']:
            r = llm.create_chat_completion(messages_of(chat), **GREEDY)
            compared += compare_greedy(llm, chat, r)
    finally:
        llm.close()
    print(f'{threads} thread(s): {compared} decisive tokens equal llama.cpp')
    assert compared >= 40, compared


def test_openai_shapes_and_streaming(smollm2):
    msgs = [{'role': 'user', 'content': 'What is the capital of France?'}]
    r = smollm2.create_chat_completion(msgs, **GREEDY)
    assert r['object'] == 'chat.completion' and r['id'].startswith('chatcmpl-')
    choice = r['choices'][0]
    assert choice['message']['role'] == 'assistant' and 'Paris' in choice['message']['content']
    assert choice['finish_reason'] == 'stop'
    u = r['usage']
    assert u['prompt_tokens'] == 16 and u['total_tokens'] == u['prompt_tokens'] + u['completion_tokens']
    chunks = list(smollm2.create_chat_completion(msgs, stream=True, **GREEDY))
    assert all(c['object'] == 'chat.completion.chunk' and c['id'] == chunks[0]['id'] for c in chunks)
    assert chunks[0]['choices'][0]['delta'] == {'role': 'assistant'}
    assert chunks[-1]['choices'][0]['delta'] == {} and chunks[-1]['choices'][0]['finish_reason'] == 'stop'
    text = ''.join(c['choices'][0]['delta'].get('content', '') for c in chunks)
    assert text == choice['message']['content']
    r = smollm2.create_chat_completion(msgs, temperature=0, max_tokens=3)
    assert r['choices'][0]['finish_reason'] == 'length' and r['usage']['completion_tokens'] == 3


def test_follow_up_reads_only_new_messages(smollm2):
    first = [{'role': 'user', 'content': 'What is the capital of France?'}]
    a = smollm2.create_chat_completion(first, **GREEDY)
    before = len(smollm2.chat_tokens())
    b = smollm2.create_chat_completion(
        first + [a['choices'][0]['message'], {'role': 'user', 'content': 'And of Italy?'}], **GREEDY)
    assert 'Rome' in b['choices'][0]['message']['content']
    # The follow-up kept the cache: its prompt is the old conversation plus < 20 new tokens.
    assert before < b['usage']['prompt_tokens'] < before + 20


def test_stop_strings(smollm2):
    msgs = [{'role': 'user', 'content': 'What is the capital of France?'}]
    r = smollm2.create_chat_completion(msgs, stop=[' of'], **GREEDY)
    assert r['choices'][0]['message']['content'] == 'The capital'
    assert r['choices'][0]['finish_reason'] == 'stop'
    chunks = list(smollm2.create_chat_completion(msgs, stop=' France', stream=True, **GREEDY))
    assert ''.join(c['choices'][0]['delta'].get('content', '') for c in chunks) == 'The capital of'


def test_response_formats(smollm2):
    msgs = [{'role': 'user', 'content': 'Describe a person as JSON with name and age.'}]
    schema = {'type': 'object', 'properties': {'name': {'type': 'string'}, 'age': {'type': 'integer'}},
              'required': ['name', 'age'], 'additionalProperties': False}
    r = smollm2.create_chat_completion(msgs, temperature=0, max_tokens=60, response_format={
        'type': 'json_schema', 'json_schema': {'name': 'person', 'schema': schema}})
    v = json.loads(r['choices'][0]['message']['content'])
    assert set(v) == {'name', 'age'} and isinstance(v['age'], int)
    r = smollm2.create_chat_completion(msgs, temperature=0, max_tokens=60,
                                       response_format={'type': 'json_object', 'schema': schema})
    assert set(json.loads(r['choices'][0]['message']['content'])) == {'name', 'age'}
    r = smollm2.create_chat_completion(msgs, temperature=0, max_tokens=80,
                                       response_format={'type': 'json_object'})
    assert r['choices'][0]['finish_reason'] == 'stop'
    assert isinstance(json.loads(r['choices'][0]['message']['content']), dict)
    r = smollm2.create_chat_completion(msgs, temperature=0, max_tokens=10, grammar='root ::= "yes" | "no"')
    assert r['choices'][0]['message']['content'] in ('yes', 'no')


def test_sampling_is_seeded(smollm2):
    msgs = [{'role': 'user', 'content': 'Write a word.'}]
    a = smollm2.create_chat_completion(msgs, temperature=1.0, max_tokens=8, seed=7)
    b = smollm2.create_chat_completion(msgs, temperature=1.0, max_tokens=8, seed=7)
    assert a['choices'][0]['message'] == b['choices'][0]['message']


def test_completion(smollm2):
    r = smollm2('The capital of France is', max_tokens=4, temperature=0, repeat_penalty=1.0)
    assert r['object'] == 'text_completion' and 'Paris' in r['choices'][0]['text']
    assert r['choices'][0]['finish_reason'] == 'length' and r['usage']['completion_tokens'] == 4


def test_bert_embeddings_match_llama_cpp():
    ref = json.loads((REPO / 'host-tests/testdata/bert/minilm-reference.json').read_text())
    llm = wasmind.Llama(fixture(MINILM), embedding=True)
    assert llm.embed_dim == 384 and llm.metadata['pooling'] == 'mean'
    vecs = llm.embed(ref['texts'])
    worst = min(cosine(v, r['embedding']) for v, r in zip(vecs, ref['rows']))
    assert worst >= MIN_COSINE, worst
    para = float(np.dot(vecs[64], vecs[65]))
    assert abs(para - 0.7553) < 2e-3, para
    e = llm.create_embedding('hello')
    assert e['object'] == 'list' and len(e['data'][0]['embedding']) == 384
    print(f'all-MiniLM-L6-v2: {len(vecs)} texts, worst cosine {worst:.7f}')
