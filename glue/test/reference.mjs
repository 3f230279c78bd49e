// The shared references and how a greedy reply is compared with llama.cpp's: token by token while
// llama.cpp is decisive (its top two logits ≥ 0.5 apart); free-running replies may part at a
// near-tie. Used by the Node and the Chromium tests of the page API.
import { readFileSync } from 'node:fs';
import assert from 'node:assert/strict';

export const shared = (p) => new URL(`../../../shared/${p}`, import.meta.url);
export const MODEL_PATH = shared('models/SmolLM2-135M-Instruct.Q4_1.gguf');
export const EMBEDDER_DIR = shared('models/m2v-minilm-256/');
export const smollm2 = () => JSON.parse(readFileSync(shared('reference/smollm2-q4_1.json')));
export const m2v = () => JSON.parse(readFileSync(shared('reference/m2v-minilm-256.json')));
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

/** Cosine of two vectors (0 when both are zero). */
export function cosine(v, e) {
  let dot = 0, nv = 0, ne = 0;
  for (let k = 0; k < e.length; k++) { dot += v[k] * e[k]; nv += v[k] * v[k]; ne += e[k] * e[k]; }
  return ne === 0 && nv === 0 ? 1 : dot / Math.sqrt(nv * ne);
}
