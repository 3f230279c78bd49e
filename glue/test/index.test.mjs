// The page API (glue/index.js) under Node: the driver in a worker_threads Worker, the model
// streamed from a file into the module's memory. Greedy replies equal llama.cpp's while it is
// decisive (single-threaded and 2 threads), multi-turn reads only the new messages, stop() and
// an AbortSignal end a reply within a token, embed() equals the Python package, failures carry
// the module's status, unload() ends the driver and load() works again.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { Wasmind } from '../index.js';
import { MODEL_PATH, EMBEDDER_DIR, BERT_DIR, smollm2, m2v, bert, unitOff, messagesOf, compareGreedy, cosine, checkStopAndAbort, REPLY_TOKENS } from './reference.mjs';

const reference = smollm2();
const GREEDY = { temperature: 0, repeatPenalty: 1, maxTokens: REPLY_TOKENS };

async function reply(ai, messages, options = GREEDY) {
  let text = '';
  for await (const piece of ai.chat(messages, options)) text += piece;
  return { text, ...ai.stats() };
}

for (const [name, create] of [['single-threaded', { threaded: false }], ['2 threads', { threads: 2 }]]) {
  test(`index.js, ${name}: llama.cpp's greedy replies; a follow-up reads only its own tokens`, async () => {
    const ai = await Wasmind.create(create);
    try {
      assert.equal(ai.threaded, name !== 'single-threaded');
      let events = 0, last = null;
      const info = await ai.load(MODEL_PATH, { context: 1024, onProgress: (p) => { events++; last = p; } });
      assert.equal(info.chat_template, 'chatml');
      assert.ok(events >= 1);
      assert.deepEqual(last, { loaded: info.bytes, total: info.bytes });
      let compared = 0;
      for (const chat of reference.greedy) {
        const r = await reply(ai, messagesOf(chat));
        compared += compareGreedy(chat, { ...(await ai.tokens()), state: r.state, text: r.text });
      }
      assert.ok(compared >= 40, `compared ${compared} decisive tokens`);
      const first = [{ role: 'user', content: 'What is the capital of France?' }];
      const a = await reply(ai, first);
      const b = await reply(ai, [...first, { role: 'assistant', content: a.text }, { role: 'user', content: 'And of Italy?' }]);
      assert.ok(b.promptTokens < 20, `follow-up ran ${b.promptTokens} prompt tokens`);
      assert.match(b.text, /Rome/);
    } finally { await ai.unload(); }
  });
}

for (const [name, create] of [['single-threaded', { threaded: false }], ['2 threads', { threads: 2 }]]) {
  test(`index.js, ${name}: stop() and an AbortSignal end a reply within a token`, async () => {
    const ai = await Wasmind.create(create);
    try {
      await ai.load(MODEL_PATH, { context: 512 });
      await checkStopAndAbort(ai);
    } finally { await ai.unload(); }
  });
}

test('index.js: embed() equals the Python package (cosine ≥ 0.99999); errors; unload and load again', async () => {
  const ref = m2v();
  const rows = ref.rows.slice(0, 60);
  const ai = await Wasmind.create({ threads: 2 });
  try {
    assert.deepEqual(await ai.loadEmbedder(EMBEDDER_DIR), { dim: ref.dim });
    const vectors = await ai.embed(rows.map((r) => r.text));
    rows.forEach((row, i) => assert.ok(cosine(vectors[i], row.embedding) >= 0.99999, `text ${i}`));
    const one = await ai.embed(rows[0].text);
    assert.ok(one instanceof Float32Array && one.length === ref.dim);
    await assert.rejects(ai.load(new Uint8Array([1, 2, 3, 4, 5])), (e) => e.name === 'WasmindError' && e.status === 'BAD_FORMAT' && /GGUF/.test(e.message));
    await assert.rejects(ai.load('/nonexistent/model.gguf'), (e) => e instanceof Error);
    // Bytes and a Blob load too (the embedder survives a larger memory).
    const bytes = readFileSync(MODEL_PATH);
    const info = await ai.load(new Blob([bytes]), { context: 256 });
    assert.equal(info.bytes, bytes.byteLength);
    assert.ok(cosine(await ai.embed(rows[1].text), rows[1].embedding) >= 0.99999, 'embedder kept');
    for (const bad of [42, null, undefined, ['a', 3]]) { // not embedded as the text 'null' or '3'
      await assert.rejects(ai.embed(bad), (e) => e.status === 'INVALID_ARGUMENT' && /a string or an array of strings/.test(e.message));
    }
    await ai.unload();
    await assert.rejects(ai.embed('x'), (e) => e.status === 'NO_MODEL');
    await ai.load(bytes, { context: 256 });
    const r = await reply(ai, [{ role: 'user', content: 'What is the capital of France?' }]);
    assert.match(r.text, /Paris/);
  } finally { await ai.unload(); }
});

test('index.js: a GGUF sentence encoder from a path, bytes and { gguf }: llama.cpp\'s vectors at unit length; a Model2Vec folder after it', async () => {
  const ref = bert().models['tiny-bert-F16.gguf'];
  const ai = await Wasmind.create({ threads: 2 });
  try {
    const path = new URL('tiny-bert-F16.gguf', BERT_DIR);
    for (const source of [path, readFileSync(path), { gguf: path }]) {
      assert.deepEqual(await ai.loadEmbedder(source), { dim: 32 });
      const vectors = await ai.embed(ref.texts);
      ref.F16.forEach((row, i) => assert.ok(unitOff(vectors[i], row.embedding) < 5e-4, `text ${i}`));
    }
    await assert.rejects(ai.loadEmbedder({ gguf: new Uint8Array([1, 2, 3]) }), (e) => e.status === 'BAD_FORMAT');
    await assert.rejects(ai.loadEmbedder(MODEL_PATH), (e) => e.status === 'UNSUPPORTED' && /not a sentence encoder/.test(e.message));
    const m = m2v();
    assert.deepEqual(await ai.loadEmbedder(EMBEDDER_DIR), { dim: m.dim });
    assert.ok(cosine(await ai.embed(m.rows[0].text), m.rows[0].embedding) >= 0.99999);
  } finally { await ai.unload(); }
});

test('index.js: a lost helper rejects the reply with HELPER_LOST within 5 s; load() starts a new module; unload() works', async () => {
  const ai = await Wasmind.create({ threads: 2 });
  try {
    await ai.load(MODEL_PATH, { context: 256 });
    await ai.loadEmbedder(EMBEDDER_DIR);
    await ai.injectFault(0, 'stall'); // as a helper worker terminated in the middle of a job
    let t0 = Date.now();
    await assert.rejects(reply(ai, [{ role: 'user', content: 'What is the capital of France?' }]),
      (e) => e.name === 'WasmindError' && e.status === 'HELPER_LOST' && /helper thread stopped mid-job/.test(e.message));
    const lostMs = Date.now() - t0;
    assert.ok(lostMs < 5000, `the error took ${lostMs} ms`);
    t0 = Date.now();
    await assert.rejects(ai.embed('hello'), (e) => e.status === 'HELPER_LOST');
    assert.ok(Date.now() - t0 < 1000, 'later calls fail at once');
    await ai.load(MODEL_PATH, { context: 256 }); // a new module, new helpers
    const r = await reply(ai, [{ role: 'user', content: 'What is the capital of France?' }]);
    assert.match(r.text, /Paris/);
    console.log(`# page API: HELPER_LOST after ${lostMs} ms`);
    await ai.injectFault(0, 'trap');
    await assert.rejects(reply(ai, [{ role: 'user', content: 'And of Italy?' }]), (e) => e.status === 'HELPER_LOST');
    t0 = Date.now();
    await ai.unload();
    assert.ok(Date.now() - t0 < 3000, `unload took ${Date.now() - t0} ms`);
  } finally { await ai.unload(); }
});

test('index.js: a split GGUF (3 parts, as gguf-split writes them) loads from its first part', async () => {
  const { splitGguf } = await import('./reference.mjs');
  const { mkdtempSync, writeFileSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const bytes = readFileSync(MODEL_PATH);
  const parts = await splitGguf(bytes, 3);
  const dir = mkdtempSync(join(tmpdir(), 'wasmind-split-'));
  parts.forEach((p, i) => writeFileSync(join(dir, `smollm2-0000${i + 1}-of-00003.gguf`), p));
  const ai = await Wasmind.create({ threads: 2 });
  try {
    let last = null;
    const info = await ai.load(join(dir, 'smollm2-00001-of-00003.gguf'), { context: 256, onProgress: (p) => { last = p; } });
    assert.equal(info.parts, 3);
    assert.equal(last.loaded, parts.reduce((n, p) => n + p.length, 0), 'progress counts every part');
    const r = await reply(ai, [{ role: 'user', content: 'What is the capital of France?' }]);
    assert.equal(r.text, 'The capital of France is Paris.');
  } finally { await ai.unload(); rmSync(dir, { recursive: true, force: true }); }
});

test('index.js over HTTP in Node: streamed (never a whole copy in the heap); no Content-Length still loads; a stalled server fails the load', async (t) => {
  const { serve } = await import('../demo/serve.js');
  const { createReadStream, statSync } = await import('node:fs');
  const { fileURLToPath } = await import('node:url');
  const file = fileURLToPath(MODEL_PATH), size = statSync(file).size;
  let hugeBytesSent = 0;
  const hanging = []; // responses left open by /stall.gguf and /silent.gguf
  const server = await serve({ port: 0, files: { '/m.gguf': file }, intercept: (req, res, url) => {
    if (url.pathname === '/silent.gguf') { hanging.push(res); return true; } // never answers
    if (url.pathname === '/stall.gguf') { // the headers and 1 MB, then nothing, the connection open
      hanging.push(res);
      res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': String(size) });
      createReadStream(file, { end: (1 << 20) - 1 }).pipe(res, { end: false });
      return true;
    }
    if (url.pathname === '/huge.gguf') { // 5 GB announced: refused before the body is read
      res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': String(5e9) });
      const block = new Uint8Array(1 << 16);
      const more = () => { while (!res.destroyed) { hugeBytesSent += block.length; if (!res.write(block)) break; } };
      res.on('drain', more); more();
      return true;
    }
    if (url.pathname !== '/chunked.gguf') return false;
    res.writeHead(200, { 'Content-Type': 'application/octet-stream' }); // no length: chunked
    createReadStream(file).pipe(res);
    return true;
  } });
  const base = `http://127.0.0.1:${server.address().port}`;
  const ai = await Wasmind.create({ threads: 2 });
  try {
    const info = await ai.load(`${base}/m.gguf`, { context: 256 });
    assert.equal(info.bytes, size);
    const u = await ai.usage();
    t.diagnostic(`Node driver during the HTTP load: heap + ArrayBuffers ${u.loadHeapBase} -> peak ${u.peakLoadHeap} (+${u.peakLoadHeap - u.loadHeapBase}), chunks ≤ ${u.chunkMax} B, model ${size} B`);
    // Sampled per chunk without a forced GC, so it counts chunks already copied in and dropped but
    // not yet collected (the Chromium test measures after a GC: ~1 MB). A whole copy of the file
    // in JS would add at least its size.
    assert.ok(u.peakLoadHeap - u.loadHeapBase < size / 2, `the load added ${u.peakLoadHeap - u.loadHeapBase} bytes`);
    const t0 = Date.now();
    await assert.rejects(ai.load(`${base}/huge.gguf`, { cache: false }),
      (e) => e.status === 'OUT_OF_MEMORY' && /the model \(5000000000 bytes\) does not fit/.test(e.message));
    t.diagnostic(`a 5 GB model URL: refused after ${Date.now() - t0} ms, ${hugeBytesSent} bytes sent by the server`);
    assert.ok(Date.now() - t0 < 5000 && hugeBytesSent < 64 << 20, `${hugeBytesSent} bytes sent before the refusal`);
    const chunked = await ai.load(`${base}/chunked.gguf`, { context: 256 });
    assert.equal(chunked.bytes, size);
    const r = await reply(ai, [{ role: 'user', content: 'What is the capital of France?' }]);
    assert.equal(r.text, 'The capital of France is Paris.');
    // A server that stops sending, or never answers: NETWORK after stallTimeout, not a wait
    // forever; the module still works after it.
    for (const [path, what] of [['/stall.gguf', /stall\.gguf: the download failed \(no data for 0\.5 s\)/], ['/silent.gguf', /silent\.gguf: no answer in 0\.5 s/]]) {
      const t1 = Date.now();
      await assert.rejects(ai.load(`${base}${path}`, { stallTimeout: 500 }), (e) => e.status === 'NETWORK' && what.test(e.message), path);
      assert.ok(Date.now() - t1 < 5000, `${path}: rejected after ${Date.now() - t1} ms`);
    }
    await assert.rejects(ai.load(`${base}/m.gguf`, { stallTimeout: 0 }), (e) => e.status === 'INVALID_ARGUMENT' && /stallTimeout must be an integer >= 1/.test(e.message));
    await ai.load(`${base}/m.gguf`, { context: 256, stallTimeout: 2000 });
    assert.equal((await reply(ai, [{ role: 'user', content: 'What is the capital of France?' }])).text, 'The capital of France is Paris.');
  } finally { await ai.unload(); for (const res of hanging) res.destroy(); server.close(); }
});

test('index.js: responseFormat (json_schema, json_object) and grammar give output a program can parse', async () => {
  const ai = await Wasmind.create({ threaded: false });
  try {
    await ai.load(MODEL_PATH, { context: 1024 });
    const schema = {
      type: 'object',
      properties: { city: { type: 'string' }, country: { type: 'string', enum: ['France', 'Italy', 'Spain'] } },
      required: ['city', 'country'],
      additionalProperties: false,
    };
    const ask = [{ role: 'user', content: 'Name the capital of France as JSON with city and country.' }];
    const a = await reply(ai, ask, { ...GREEDY, maxTokens: 64, responseFormat: { type: 'json_schema', json_schema: { name: 'place', schema } } });
    assert.equal(a.state, 'eog', a.text);
    const v = JSON.parse(a.text);
    assert.deepEqual(Object.keys(v).sort(), ['city', 'country']);
    assert.ok(['France', 'Italy', 'Spain'].includes(v.country), a.text);
    const b = await reply(ai, [{ role: 'user', content: 'Give me a JSON object with the name of the capital of France.' }],
      { ...GREEDY, maxTokens: 128, responseFormat: { type: 'json_object' } });
    assert.equal(b.state, 'eog', b.text); // ended where the grammar may end, not at the token limit
    assert.equal(typeof JSON.parse(b.text), 'object', b.text);
    const c = await reply(ai, [{ role: 'user', content: 'Is Paris in France?' }], { ...GREEDY, maxTokens: 8, grammar: 'root ::= "yes" | "no"' });
    assert.match(c.text, /^(yes|no)$/);
    await assert.rejects(reply(ai, ask, { responseFormat: { type: 'xml' } }), (e) => e.status === 'INVALID_ARGUMENT');
    // Settings of the wrong kind, and options chat does not take, are errors (not converted or ignored).
    for (const [bad, what] of [[{ temprature: 0.5 }, /chat: unknown option 'temprature'/], [{ topK: 'all' }, /topK must be an integer/],
      [{ topK: 2.5 }, /topK must be an integer/], [{ seed: -1 }, /seed must be an integer/], [{ temperature: '0.5' }, /temperature must be a number/],
      [{ temperature: NaN }, /temperature/], [{ maxTokens: -1 }, /maxTokens must be an integer/], [{ maxTokens: '8' }, /maxTokens must be an integer/]]) {
      await assert.rejects(reply(ai, ask, bad), (e) => e.status === 'INVALID_ARGUMENT' && what.test(e.message), JSON.stringify(bad));
    }
    // Messages outside OpenAI's text shape are errors too (not a system message, not the text '42' or '[object Object]').
    for (const [bad, what] of [['hi', /array of messages/], [[null], /message 0 is null/], [[{ role: 'tool', content: 'x' }], /role "tool"/],
      [[{ content: 'x' }], /role undefined/], [[{ role: 'user', content: 42 }], /content is number 42/],
      [[{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }], /content part 0/]]) {
      await assert.rejects(reply(ai, bad, GREEDY), (e) => e.status === 'INVALID_ARGUMENT' && what.test(e.message), JSON.stringify(bad));
    }
    for (const [call, what] of [[() => Wasmind.create({ thread: 2 }), /unknown option 'thread'/], [() => Wasmind.create({ threads: 1.5 }), /threads must be an integer/],
      [() => ai.load(MODEL_PATH, { contxt: 64 }), /load: unknown option 'contxt'/], [() => ai.load(MODEL_PATH, { context: '64' }), /context must be an integer/],
      [() => ai.loadEmbedder(EMBEDDER_DIR, { cache: 'no' }), /cache must be a boolean/],
      [() => ai.loadEmbedder(null), /a folder URL, \{ safetensors, tokenizer, config \} or a GGUF file, not null/],
      [() => ai.loadEmbedder({ safetensors: `${EMBEDDER_DIR}/model.safetensors` }), /tokenizer, config missing/]]) {
      await assert.rejects(call(), (e) => e.status === 'INVALID_ARGUMENT' && what.test(e.message), String(what));
    }
    const ok = await reply(ai, [{ role: 'user', content: 'Is Paris in France?' }], { ...GREEDY, maxTokens: 8, grammar: 'root ::= "yes" | "no"' });
    assert.equal(ok.text, c.text); // the module still answers after the refusals
    const parts = [{ type: 'text', text: 'Is Paris ' }, { type: 'text', text: 'in France?' }];
    await ai.reset();
    const fromParts = await reply(ai, [{ role: 'developer', content: 'Answer briefly.' }, { role: 'user', content: parts }], { ...GREEDY, maxTokens: 8 });
    await ai.reset();
    const fromText = await reply(ai, [{ role: 'system', content: 'Answer briefly.' }, { role: 'user', content: 'Is Paris in France?' }], { ...GREEDY, maxTokens: 8 });
    assert.equal(fromParts.text, fromText.text); // text parts are joined, 'developer' is 'system'
  } finally { await ai.unload(); }
});

test('index.js: a conversation past the context rejects with CONTEXT_FULL, or drops its oldest turns with dropOldest', async () => {
  const ai = await Wasmind.create({ threads: 1 });
  try {
    await ai.load(MODEL_PATH, { context: 64 });
    const talk = async (dropOldest) => {
      const msgs = [{ role: 'system', content: 'Be brief.' }];
      for (let i = 0; i < 3; i++) {
        msgs.push({ role: 'user', content: `Tell me a long story about dragon number ${i}.` });
        const r = await reply(ai, msgs, { ...GREEDY, maxTokens: 20, dropOldest });
        msgs.push({ role: 'assistant', content: r.text });
      }
      return ai.stats();
    };
    await assert.rejects(talk(false), (e) => e.status === 'CONTEXT_FULL' && /drop the oldest/.test(e.message));
    await ai.reset();
    const s = await talk(true);
    assert.equal(s.state, 'limit');
    assert.ok(s.droppedMessages >= 2, JSON.stringify(s));
  } finally { await ai.unload(); }
});

// A driver that never says it is listening, or never answers `init` (a stalled fetch of the
// module, a worker starved of its script): `create` rejects with TIMEOUT naming what it waited
// for, and the worker is ended (its heartbeat file stops growing) instead of running on.
test('index.js: a driver that does not start in startTimeout is ended, and create rejects with TIMEOUT', async () => {
  const { mkdtempSync, writeFileSync, copyFileSync, statSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const { pathToFileURL } = await import('node:url');
  const glue = new URL('..', import.meta.url);
  for (const [answers, waited] of [[false, /driver worker \(driver\.js\) did not start within 300 ms/], [true, /module did not load from .* within 300 ms/]]) {
    const dir = mkdtempSync(join(tmpdir(), 'wasmind-late-'));
    try {
      for (const f of ['index.js', 'wasmind.js', 'source.js']) copyFileSync(new URL(f, glue), join(dir, f));
      const beat = join(dir, 'heartbeat');
      writeFileSync(beat, '');
      writeFileSync(join(dir, 'driver.js'), `import { parentPort } from 'node:worker_threads';
        import { appendFileSync } from 'node:fs';
        setInterval(() => appendFileSync(${JSON.stringify(beat)}, '.'), 10);
        ${answers ? "parentPort.postMessage({ event: 'listening' }); parentPort.on('message', () => {});" : ''}`);
      const { Wasmind: Late } = await import(pathToFileURL(join(dir, 'index.js')).href);
      const t0 = Date.now();
      await assert.rejects(Late.create({ startTimeout: 300 }), (e) => e.status === 'TIMEOUT' && waited.test(e.message), String(waited));
      assert.ok(Date.now() - t0 < 5000, `rejected after ${Date.now() - t0} ms`);
      await new Promise((r) => setTimeout(r, 100));
      const size = statSync(beat).size;
      assert.ok(size > 0, 'the fake driver ran');
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(statSync(beat).size, size, 'the late driver was ended');
    } finally { rmSync(dir, { recursive: true, force: true }); }
  }
  await assert.rejects(Wasmind.create({ startTimeout: 0 }), (e) => e.status === 'INVALID_ARGUMENT' && /startTimeout must be an integer >= 1/.test(e.message));
});
