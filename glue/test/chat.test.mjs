// Chat and embeddings through glue/wasmind.js in Node, single-threaded and with helpers:
// llama.cpp's prompt ids and greedy replies (where llama.cpp is decisive) for the shared
// SmolLM2 references, the stop flag set from another thread, and Model2Vec vectors against the
// Python package's.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fixture } from './reference.mjs';
import { Worker } from 'node:worker_threads';
import { load, memoryFor } from '../wasmind.js';

const model = readFileSync(fixture('models/SmolLM2-135M-Instruct.Q4_1.gguf'));
const reference = JSON.parse(readFileSync(fixture('reference/smollm2-q4_1.json')));
const DECISIVE = 0.5, REPLY_TOKENS = 12;

async function withModule(threads, fn) {
  const wm = await load(threads === 0 ? { threaded: false }
    : { threads, maxMemory: memoryFor(model.byteLength) });
  try { return await fn(wm); } finally { await wm.close(); }
}

for (const threads of [0, 2]) {
  const name = threads === 0 ? 'single-threaded' : `${threads} threads`;

  test(`${name}: llama.cpp's prompt ids, and its greedy reply while it is decisive`, () => withModule(threads, (wm) => {
    const info = wm.loadModel(model, { context: 1024 });
    assert.equal(info.chat_template, 'chatml');
    wm.setSampler({ temperature: 0, repeatPenalty: 1 });
    let compared = 0;
    for (const chat of reference.greedy) {
      wm.resetChat();
      if (chat.system !== null) wm.addMessage('system', chat.system);
      wm.addMessage('user', chat.user);
      const pieces = [];
      const it = wm.reply({ maxTokens: REPLY_TOKENS });
      let r;
      while (!(r = it.next()).done) pieces.push(r.value);
      const stats = r.value, ids = wm.chatTokens();
      assert.deepEqual(ids.slice(0, chat.prompt_ids.length), chat.prompt_ids, chat.user);
      const reply = ids.slice(chat.prompt_ids.length);
      if (stats.state === 'eog') reply.push(stats.last_token ?? wm.exports.chat_last_token());
      for (let i = 0; i < chat.steps.length && i < reply.length; i++) {
        const [a, b] = chat.steps[i].logits;
        if (a - b < DECISIVE) break; // free-running replies may part at a near-tie
        assert.equal(reply[i], chat.ids[i], `${chat.user}: token ${i}`);
        compared++;
      }
      assert.ok(['eog', 'limit'].includes(stats.state), stats.state);
      // Where the whole reply is llama.cpp's, so is its streamed text.
      const same = reply.every((id, i) => id === chat.ids[i]);
      if (same) assert.ok(chat.text.startsWith(pieces.join('')), `${pieces.join('')} vs ${chat.text}`);
    }
    assert.ok(compared >= 40, `compared ${compared} decisive tokens`);
  }));
}

test('setTemplate picks a template by name and lists the names on an unknown one', () => withModule(0, (wm) => {
  wm.loadModel(readFileSync(fixture('models/vocab/vocab-bpe-smollm.gguf')));
  wm.setTemplate('gemma');
  assert.equal(wm.modelInfo().chat_template, 'gemma');
  assert.throws(() => wm.setTemplate('nope'), /known: chatml, llama3, gemma/);
  wm.setTemplate('');
  assert.equal(wm.modelInfo().chat_template, 'chatml');
}));

test('the stop flag, set from another thread, ends a reply; the next reply runs', () => withModule(2, async (wm) => {
  wm.loadModel(model, { context: 512 });
  wm.setSampler({ temperature: 0, repeatPenalty: 1 });
  wm.addMessage('raw', '1, 2, 3, 4, 5, 6, 7,');
  // The worker waits until this thread has three pieces, then stores 1 at the stop flag.
  const progress = new Int32Array(new SharedArrayBuffer(4));
  const stopper = new Worker(`const { workerData: { memory, index, progress } } = require('node:worker_threads');
    Atomics.wait(progress, 0, 0, 60000);
    Atomics.store(new Int32Array(memory.buffer), index, 1);`,
  { eval: true, workerData: { ...wm.stopFlag(), progress } });
  await new Promise((ready) => stopper.on('online', ready));
  let text = '', pieces = 0;
  const it = wm.reply();
  let r;
  while (!(r = it.next()).done) {
    text += r.value;
    if (++pieces === 3) { Atomics.store(progress, 0, 1); Atomics.notify(progress, 0); }
  }
  await new Promise((done) => stopper.on('exit', done));
  assert.equal(r.value.state, 'stopped', `${r.value.state} after ${r.value.tokens} tokens: ${text}`);
  assert.ok(r.value.tokens >= 3 && r.value.tokens < 100, `${r.value.tokens} tokens`);
  assert.match(text, /^ 8,/);
  wm.addMessage('raw', ' and so on.');
  const more = wm.replyText({ maxTokens: 4 });
  assert.equal(wm.chatStats().state, 'limit', more);
}));

test('Model2Vec vectors equal the Python package\'s (single-threaded and 2 threads)', async () => {
  const dir = 'models/potion-base-8M';
  const files = { safetensors: readFileSync(fixture(`${dir}/model.safetensors`)),
    tokenizer: readFileSync(fixture(`${dir}/tokenizer.json`)), config: readFileSync(fixture(`${dir}/config.json`)) };
  const ref = JSON.parse(readFileSync(fixture('reference/potion-base-8M.json')));
  const rows = ref.rows.slice(0, 120);
  for (const threads of [0, 2]) {
    await withModule(threads, (wm) => {
      assert.equal(wm.loadEmbedder(files), ref.dim);
      const vectors = wm.embed(rows.map((r) => r.text));
      rows.forEach((row, i) => {
        const v = vectors[i], e = row.embedding;
        let dot = 0, nv = 0, ne = 0;
        for (let k = 0; k < e.length; k++) { dot += v[k] * e[k]; nv += v[k] * v[k]; ne += e[k] * e[k]; }
        if (ne === 0) assert.equal(nv, 0, `text ${i}: zero vector`);
        else assert.ok(dot / Math.sqrt(nv * ne) >= 0.99999, `text ${i}: cosine ${dot / Math.sqrt(nv * ne)}`);
      });
      assert.deepEqual([...wm.embed([''])[0]].every((x) => x === 0), true, 'empty text: zero vector');
    });
  }
});
