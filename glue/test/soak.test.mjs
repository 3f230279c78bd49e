// The soak in Node, through the low-level glue with the threaded module and real worker_threads
// helpers (host-tests/tests/leaks.rs is the same in wasmtime): load -> chat -> embed -> unload
// cycles give the module's heap back (heap_in_use within 1 MiB of the start after every cycle,
// flat after the first), and replies with random seeds, thread counts 1-4 and stop requests
// are the single-threaded module's reply with the same seed, or a prefix of it when stopped.
// A few of each here; `cargo xtask soak --cycles N` runs N cycles and 5 N replies
// (WASMIND_SOAK_CYCLES, WASMIND_SOAK_REPLIES).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { load, memoryFor } from '../wasmind.js';
import { MODEL_PATH, EMBEDDER_DIR } from './reference.mjs';

const setting = (name, fallback) => Number(process.env[name] ?? fallback);
const CYCLES = setting('WASMIND_SOAK_CYCLES', 3), REPLIES = setting('WASMIND_SOAK_REPLIES', 12);
const LEAK_TOLERANCE = 1 << 20, THREADS = 4, REPLY_TOKENS = 24;
const model = readFileSync(MODEL_PATH);
const embedder = Object.fromEntries(['model.safetensors', 'tokenizer.json', 'config.json']
  .map((f, i) => [['safetensors', 'tokenizer', 'config'][i], readFileSync(new URL(f, EMBEDDER_DIR))]));
const room = memoryFor(model.byteLength + embedder.safetensors.byteLength);
// A hang fails the test instead of stalling the run: generous limits, 5 s a cycle or a reply.
const limit = (n) => ({ timeout: 120_000 + 5000 * n });

test(`threaded module, ${THREADS} threads: ${CYCLES} load -> chat -> embed -> unload cycles give the heap back`, limit(CYCLES), async (t) => {
  const wm = await load({ threads: THREADS, maxMemory: room });
  try {
    assert.equal(wm.threaded, true);
    assert.equal(wm.exports.pool_helpers_ready(), THREADS - 1);
    const start = wm.heapInUse(), after = [];
    for (let cycle = 0; cycle < CYCLES; cycle++) {
      wm.loadModel(model, { context: 256 });
      wm.setSampler({ seed: cycle });
      wm.addMessage('user', 'What is the capital of France?');
      assert.ok(wm.replyText({ maxTokens: 8 }).length > 0, `cycle ${cycle}: an empty reply`);
      const dim = wm.loadEmbedder(embedder);
      const vectors = wm.embed(['a sentence to embed', 'another one', 'déjà vu 😀']);
      assert.ok(vectors.every((v) => v.length === dim));
      assert.ok(wm.heapInUse() > start + 90e6, 'the model is in use');
      wm.unloadModel();
      wm.unloadEmbedder();
      const now = wm.heapInUse();
      assert.ok(now <= start + LEAK_TOLERANCE, `cycle ${cycle}: ${now} bytes in use after unloading, ${start} before the first load`);
      after.push(now);
    }
    // What the first cycle leaves (buffers kept for the next call) is all that stays.
    assert.ok(after.every((a) => Math.abs(a - after[0]) <= 64 << 10), `the heap grows from cycle to cycle: ${after}`);
    t.diagnostic(`heap in use ${start} bytes at the start, after each cycle ${after.join(', ')}`);
  } finally { await wm.close(); }
});

const PROMPTS = ['Write a short poem about the sea.', 'What is the capital of France?', 'List three fruits.',
  'Tell me a story about a dragon.'];

/** The reply to `prompt` from a fresh conversation: its text, the ids in the cache after it and
 *  its stats. `stopAfter` pieces, the reply is asked to stop: by `stop()` or, as another thread
 *  would, by a store to the stop flag. */
function reply(wm, { prompt, seed, stopAfter = null, byFlag = false }) {
  wm.resetChat();
  wm.setSampler({ temperature: 0.8, seed });
  wm.addMessage('user', prompt);
  let text = '', pieces = 0;
  const it = wm.reply({ maxTokens: REPLY_TOKENS });
  for (let r = it.next(); ; r = it.next()) {
    if (r.done) return { text, pieces, ids: wm.chatTokens(), stats: r.value };
    text += r.value;
    if (++pieces !== stopAfter) continue;
    if (!byFlag) wm.stop();
    else { const { memory, index } = wm.stopFlag(); Atomics.store(new Int32Array(memory.buffer), index, 1); }
  }
}

test(`${REPLIES} replies with random seeds, 1-${THREADS} threads and stops equal the single-threaded module's`, limit(REPLIES), async (t) => {
  const st = await load({ threaded: false });
  const mt = await load({ threads: THREADS, maxMemory: memoryFor(model.byteLength) });
  try {
    for (const wm of [st, mt]) wm.loadModel(model, { context: 512 });
    let rng = 0x9e3779b9;
    const next = () => { rng ^= rng << 13; rng ^= rng >>> 17; rng ^= rng << 5; return rng >>> 0; };
    let whole = 0, stopped = 0;
    for (let i = 0; i < REPLIES; i++) {
      const seed = next() % 1_000_000, threads = 1 + (next() % THREADS);
      const stopAfter = next() % 3 === 0 ? 1 + (next() % 6) : null;
      const prompt = PROMPTS[i % PROMPTS.length];
      const want = reply(st, { prompt, seed });
      mt.setThreads(threads);
      const got = reply(mt, { prompt, seed, stopAfter, byFlag: i % 2 === 1 });
      const what = `reply ${i}: seed ${seed}, ${threads} threads, stop after ${stopAfter} pieces`;
      if (got.stats.state === 'stopped') {
        stopped++;
        assert.ok(stopAfter !== null, `${what}: stopped unasked`);
        assert.deepEqual(got.ids, want.ids.slice(0, got.ids.length), `${what}: not a prefix`);
        assert.ok(want.text.startsWith(got.text), `${what}: ${JSON.stringify(got.text)} vs ${JSON.stringify(want.text)}`);
      } else {
        // A stop asked for after the last piece has nothing left to end.
        assert.ok(stopAfter === null || got.pieces <= stopAfter, `${what}: not stopped after ${got.pieces} pieces`);
        whole++;
        assert.equal(got.stats.state, want.stats.state, what);
        assert.ok(['eog', 'limit'].includes(got.stats.state), what);
        assert.deepEqual(got.ids, want.ids, what);
        assert.equal(got.stats.last_token, want.stats.last_token, what);
        assert.equal(got.text, want.text, what);
      }
    }
    t.diagnostic(`${REPLIES} replies: ${whole} whole and equal to the single-threaded module's, ${stopped} stopped and a prefix of it`);
  } finally { await mt.close(); }
});
