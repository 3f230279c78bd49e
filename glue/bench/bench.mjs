// bench.mjs: throughput of the real .wasm modules in Node through glue/wasmind.js, one JSON
// object per line on stdout (the same fields as host-tests' `bench`). `cargo xtask bench` runs it.
//
//   node glue/bench/bench.mjs llm      --model M.gguf --prompt-file P.txt [--long-prompt-file L.txt] [--gen 128] [--threads 0,1,2,4,8] [--reps 3]
//   node glue/bench/bench.mjs tokenize --model M.gguf --texts T.json [--min-secs 1]
//   node glue/bench/bench.mjs embed    --model DIR|E.gguf --texts T.json --set NAME [--threads 0,1,2] [--min-secs 1]
//
// `--threads 0` is the single-threaded module; N >= 1 the threaded one with N - 1 helper workers.
// `--dist DIR` takes the two .wasm files from DIR instead of dist/.
// Inputs are copied into linear memory once; the timed loops contain only export calls
// (measure.mjs: the LLM measurement, shared with the Chromium bench).
import { readFile, stat } from 'node:fs/promises';
import { pathToFileURL } from 'node:url';
import { loadavg } from 'node:os';
import { hasRelaxedSimd, load, memoryFor, moduleFile } from '../wasmind.js';
import { check, median, measureLlm, putText } from './measure.mjs';

const [cmd, ...rest] = process.argv.slice(2);
const opt = (name, dflt) => { const i = rest.indexOf(name); return i >= 0 ? rest[i + 1] : dflt; };
const need = (name) => opt(name) ?? fail(`missing ${name}`);
const threadList = (dflt) => opt('--threads', dflt).split(',').map(Number);
function fail(msg) { console.error(`bench.mjs: ${msg}`); process.exit(1); }

const emit = (v) => console.log(JSON.stringify({ ...v, engine: 'node', loadavg: loadavg()[0] }));
// The file load() picks for `threads` here (the relaxed-SIMD build where Node runs relaxed SIMD).
const moduleName = (t) => moduleFile(t !== 0, hasRelaxedSimd());
const now = () => performance.now() / 1000;

const DIST = opt('--dist') && pathToFileURL(opt('--dist').replace(/\/?$/, '/'));

async function open(threads, maxMemory) {
  const dist = DIST ? { dist: DIST } : {};
  return threads === 0 ? load({ threaded: false, ...dist }) : load({ threaded: true, threads, maxMemory, ...dist });
}

async function llm() {
  const modelBytes = await readFile(need('--model'));
  const prompt = await readFile(need('--prompt-file'), 'utf8');
  const longPrompt = opt('--long-prompt-file') && await readFile(opt('--long-prompt-file'), 'utf8');
  const gen = Number(opt('--gen', 128)), reps = Number(opt('--reps', 3));
  for (const threads of threadList('0,1,2,4,8')) {
    const wm = await open(threads, memoryFor(modelBytes.length) + 64 * 2 ** 20);
    emit({ bench: 'llm', module: moduleName(threads), threads, ...measureLlm(wm, { takeModel: () => modelBytes, prompt, longPrompt, gen, reps }) });
    await wm.close();
  }
}

/** One untimed pass, then passes until `minSecs` have gone by (at least 3); their durations. */
function timedPasses(minSecs, pass) {
  pass();
  const times = [], start = now();
  while (times.length < 3 || now() - start < minSecs) {
    const t = now();
    pass();
    times.push(now() - t);
  }
  return times;
}

function rates(times, texts, bytes) {
  const best = Math.min(...times), med = median(times);
  return { texts, bytes, passes: times.length, texts_per_s: texts / best, mb_per_s: bytes / best / 1e6,
    texts_per_s_median: texts / med, mb_per_s_median: bytes / med / 1e6 };
}

async function tokenize() {
  const modelBytes = await readFile(need('--model'));
  const texts = JSON.parse(await readFile(need('--texts'), 'utf8'));
  const minSecs = Number(opt('--min-secs', 1));
  const wm = await open(0);
  const x = wm.exports;
  check(wm, x.load_model(wm.put(modelBytes), modelBytes.length), 'load_model');
  const placed = texts.map((t) => putText(wm, t));
  const cap = Math.max(...placed.map(([, n]) => n)) + 8, out = x.alloc(cap * 4);
  let ids = 0;
  const times = timedPasses(minSecs, () => {
    ids = 0;
    for (const [p, n] of placed) ids += check(wm, x.tokenize(p, n, 0, out, cap), 'tokenize');
  });
  const bytes = placed.reduce((a, [, n]) => a + n, 0);
  emit({ bench: 'tokenize', module: moduleName(0), ids, ...rates(times, texts.length, bytes) });
}

async function embed() {
  const path = need('--model').replace(/\/$/, '');
  const texts = JSON.parse(await readFile(need('--texts'), 'utf8'));
  const set = opt('--set', 'texts'), minSecs = Number(opt('--min-secs', 1));
  // A Model2Vec folder's three files, or an encoder GGUF (a file) as the first, the others empty.
  const encoder = !(await stat(path)).isDirectory();
  const [st, tok, cfg] = encoder ? [await readFile(path), new Uint8Array(0), new Uint8Array(0)]
    : await Promise.all(['model.safetensors', 'tokenizer.json', 'config.json'].map((f) => readFile(`${path}/${f}`)));
  for (const threads of threadList('0,1,2')) {
    const wm = await open(threads, memoryFor(st.length) + 64 * 2 ** 20);
    const x = wm.exports;
    const put = (b) => (b.length ? wm.put(b) : 0);
    const dim = check(wm, x.load_embedder(put(st), st.length, put(tok), tok.length, put(cfg), cfg.length), 'load_embedder');
    const placed = texts.map((t) => putText(wm, t));
    const bytes = placed.reduce((a, [, n]) => a + n, 0);
    const out = x.alloc(texts.length * dim * 4);
    // One text per call: Model2Vec's embed does not use the pool (only single-threaded is
    // meaningful); an encoder's does, and its embed_batch runs the same texts one by one.
    if (threads <= 1 || encoder) {
      const times = timedPasses(minSecs, () => {
        for (const [p, n] of placed) check(wm, x.embed(p, n, out), 'embed');
      });
      emit({ bench: 'embed', api: 'embed', set, module: moduleName(threads), threads: Math.max(1, threads), ...rates(times, texts.length, bytes) });
    }
    if (encoder) { await wm.close(); continue; }
    const enc = texts.map((t) => new TextEncoder().encode(t));
    const joined = new Uint8Array(bytes), offsets = new Uint32Array(texts.length + 1);
    enc.forEach((b, i) => { joined.set(b, offsets[i]); offsets[i + 1] = offsets[i] + b.length; });
    const t = wm.put(joined.length ? joined : new Uint8Array(1)), o = wm.put(offsets);
    const times = timedPasses(minSecs, () => check(wm, x.embed_batch(t, o, texts.length, out), 'embed_batch'));
    emit({ bench: 'embed', api: 'embed_batch', set, module: moduleName(threads), threads: Math.max(1, threads), ...rates(times, texts.length, bytes) });
    await wm.close();
  }
}

const commands = { llm, tokenize, embed };
if (!commands[cmd]) fail('usage: bench.mjs (llm | tokenize | embed) [options]');
await commands[cmd]();
