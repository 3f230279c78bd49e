// The fixtures, llama.cpp's references and how a greedy reply is compared with llama.cpp's: token by token while
// llama.cpp is decisive (its top two logits ≥ 0.5 apart); free-running replies may part at a
// near-tie. Used by the Node and the Chromium tests of the page API.
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import assert from 'node:assert/strict';

/** The fixtures folder (`cargo xtask fixtures` makes it): $WASMIND_FIXTURES, else target/fixtures/. */
const FIXTURES = process.env.WASMIND_FIXTURES ? pathToFileURL(`${process.env.WASMIND_FIXTURES}/`)
  : new URL('../../target/fixtures/', import.meta.url);
/** The URL of fixture `p` (e.g. `models/tiny/tiny-llama-Q8_0.gguf`). */
export const fixture = (p) => new URL(p, FIXTURES);
export const MODEL_PATH = fixture('models/SmolLM2-135M-Instruct.Q4_1.gguf');
export const EMBEDDER_DIR = fixture('models/potion-base-8M/');
export const smollm2 = () => JSON.parse(readFileSync(fixture('reference/smollm2-q4_1.json')));
export const m2v = () => JSON.parse(readFileSync(fixture('reference/potion-base-8M.json')));
/** The tiny BERT sentence encoders of host-tests/testdata/bert/ and llama.cpp's vectors for them. */
export const BERT_DIR = new URL('../../host-tests/testdata/bert/', import.meta.url);
export const bert = () => JSON.parse(readFileSync(new URL('reference.json', BERT_DIR)));
/** |v - w / |w|| at its largest: how far a unit vector is from llama.cpp's (unnormalized) one. */
export function unitOff(v, w) {
  const n = Math.hypot(...w);
  return Math.max(...w.map((x, i) => Math.abs(v[i] - x / n)));
}
export const DECISIVE = 0.5, REPLY_TOKENS = 12;

/** OpenAI-shaped messages of a reference conversation. */
export const messagesOf = (chat) => [...(chat.system !== null ? [{ role: 'system', content: chat.system }] : []),
  { role: 'user', content: chat.user }];

/** Checks one greedy reply ({ ids, last, state, text }) against `chat`; returns the tokens compared. */
export function compareGreedy(chat, { ids, last, state, text }) {
  assert.deepEqual(ids.slice(0, chat.prompt_ids.length), chat.prompt_ids, `${chat.user}: prompt ids`);
  const reply = ids.slice(chat.prompt_ids.length);
  if (state === 'eog') reply.push(last);
  let compared = 0;
  for (let i = 0; i < chat.steps.length && i < reply.length; i++) {
    const [a, b] = chat.steps[i].logits;
    if (a - b < DECISIVE) break;
    assert.equal(reply[i], chat.ids[i], `${chat.user}: token ${i}`);
    compared++;
  }
  assert.ok(['eog', 'limit'].includes(state), state);
  if (reply.every((id, i) => id === chat.ids[i])) assert.ok(chat.text.startsWith(text), `${text} vs ${chat.text}`);
  return compared;
}

/** A page-API instance (glue/index.js) with a model loaded: stop() after the 5th piece and an
 *  AbortSignal after the 3rd end a reply (state 'stopped'; the abort rejects with AbortError),
 *  and the next reply runs. */
export async function checkStopAndAbort(ai) {
  let n = 0;
  for await (const _ of ai.chat([{ role: 'user', content: 'Write a very long story about a dragon.' }], { temperature: 0 })) {
    if (++n === 5) ai.stop();
  }
  assert.equal(ai.stats().state, 'stopped');
  // stop() came after the 5th piece arrived; the driver may be a few tokens ahead of the
  // consumer (pieces in flight between the threads, more so on a loaded machine).
  assert.ok(ai.stats().tokens <= 10, `stop(): ${ai.stats().tokens} tokens`);
  const ac = new AbortController();
  n = 0;
  await assert.rejects(async () => {
    for await (const _ of ai.chat([{ role: 'user', content: 'Write a long poem.' }], { signal: ac.signal })) if (++n === 3) ac.abort();
  }, (e) => e.name === 'AbortError');
  assert.equal(ai.stats().state, 'stopped');
  let after = '';
  for await (const piece of ai.chat([{ role: 'user', content: 'What is the capital of France?' }], { temperature: 0, maxTokens: REPLY_TOKENS })) after += piece;
  assert.match(after, /Paris/);
}

/** Cosine of two vectors (0 when both are zero). */
export function cosine(v, e) {
  let dot = 0, nv = 0, ne = 0;
  for (let k = 0; k < e.length; k++) { dot += v[k] * e[k]; nv += v[k] * v[k]; ne += e[k] * e[k]; }
  return ne === 0 && nv === 0 ? 1 : dot / Math.sqrt(nv * ne);
}

/** Writes `gguf` (bytes) as `n` parts the way llama.cpp's gguf-split does (the first part keeps
 *  the key-values, every part gets split.no / split.count / split.tensors.count and its own data
 *  section); returns the parts' bytes. For the split-loading tests. */
export async function splitGguf(gguf, n) {
  const { parseHeader } = await import('../gguf-split.js');
  const h = parseHeader(gguf);
  const data = gguf.subarray(h.dataStart);
  const enc = new TextEncoder();
  const per = Math.ceil(h.tensors.length / n), parts = [];
  for (let k = 0; k < n; k++) {
    const ts = h.tensors.slice(k * per, (k + 1) * per);
    const from = ts[0].offset, to = k === n - 1 ? data.length : h.tensors[(k + 1) * per].offset;
    const out = [];
    const u16 = (x) => { const a = new Uint8Array(2); new DataView(a.buffer).setUint16(0, x, true); out.push(a); };
    const u32 = (x) => { const a = new Uint8Array(4); new DataView(a.buffer).setUint32(0, x, true); out.push(a); };
    const u64 = (x) => { const a = new Uint8Array(8); new DataView(a.buffer).setBigUint64(0, BigInt(x), true); out.push(a); };
    const str = (s) => { const b = enc.encode(s); u64(b.length); out.push(b); };
    const kvs = k === 0 ? h.kvs : [];
    out.push(enc.encode('GGUF')); u32(3); u64(ts.length); u64(kvs.length + 3);
    for (const kv of kvs) out.push(gguf.subarray(kv.start, kv.end));
    str('split.no'); u32(2); u16(k);
    str('split.count'); u32(2); u16(n);
    str('split.tensors.count'); u32(5); u32(h.tensors.length);
    for (const t of ts) { str(t.name); u32(t.dims.length); t.dims.forEach(u64); u32(t.type); u64(t.offset - from); }
    const alignment = k === 0 ? h.alignment : 32;
    let len = out.reduce((s, b) => s + b.length, 0);
    out.push(new Uint8Array(Math.ceil(len / alignment) * alignment - len));
    out.push(data.subarray(from, to));
    len = out.reduce((s, b) => s + b.length, 0);
    const part = new Uint8Array(len); let at = 0;
    for (const b of out) { part.set(b, at); at += b.length; }
    parts.push(part);
  }
  return parts;
}
