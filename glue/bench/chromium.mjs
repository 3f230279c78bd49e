// chromium.mjs: LLM speed where users run it — in Debian's headless Chromium, driven by
// playwright-core — for wasmind (glue/wasmind.js in a module Worker, browser-worker.mjs) and its
// peer wllama (llama.cpp compiled to wasm, npm @wllama/wllama) in two releases: 3.13.0 (the
// current one: llama-server's loop) and 2.4.0 (the last 2.x: separate single- and multi-thread
// builds, low-level decode calls). Same page server, model and prompts; the settings are run
// interleaved (round after round, each engine at each thread count in turn) and each row is the
// best round. `cargo xtask bench` runs it.
//
//   node glue/bench/chromium.mjs --model M.gguf --prompt-file P.txt [--long-prompt-file L.txt]
//        [--gen 128] [--threads 0,1,2] [--reps 2] [--rounds 2]
//        [--engines wasmind,wasmind-simd128,wllama2,wllama3]
//
// `wasmind` runs the build the glue picks (the relaxed-SIMD one where Chromium has relaxed SIMD),
// `wasmind-simd128` the SIMD128 build, for the ratio between the two.
//
// Per row: prefill and decode tok/s; `ttft_ms`, the time to the first token of the long prompt
// (its prefill and the pick of a token; wllama 3: the wall time of a one-token completion);
// `peak_rss_mb`, the renderer process's peak resident memory (VmHWM, workers included: each run
// gets a fresh browser context, so a fresh renderer); for wasmind the streaming read bandwidth
// inside the module at that thread count and decode as a fraction of the ceiling it sets
// (bandwidth ÷ the weight bytes a token reads). wllama 3 figures are llama.cpp's own
// timings, the others are timed in the page or worker. Thread count 0 is the page served without
// COOP/COEP: wasmind's single-threaded module, wllama's single-thread runtime; N >= 1 an
// isolated page with N threads (wasmind: the threaded module with N - 1 helper workers).
// wllama needs `npm ci` in glue/bench; wasmind needs dist/ (`cargo xtask dist`).
import { readFile } from 'node:fs/promises';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { serve } from '../demo/serve.js';
import { median } from './measure.mjs';
import { moduleFile } from '../wasmind.js';

const args = process.argv.slice(2);
const opt = (name, dflt) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : dflt; };
const MODEL = opt('--model'), PROMPT = await readFile(opt('--prompt-file'), 'utf8');
const LONG = opt('--long-prompt-file') ? await readFile(opt('--long-prompt-file'), 'utf8') : null;
const GEN = Number(opt('--gen', 128)), REPS = Number(opt('--reps', 2)), ROUNDS = Number(opt('--rounds', 2));
const THREADS = opt('--threads', '0,1,2').split(',').map(Number);
const ENGINES = opt('--engines', 'wasmind,wasmind-simd128,wllama2,wllama3').split(',');
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
  '--disable-component-update', '--disable-sync',
  // Extra flags, ';'-separated, e.g. CHROMIUM_FLAGS='--js-flags=--perf-prof --perf-prof-annotate-wasm'.
  ...(process.env.CHROMIUM_FLAGS ?? '').split(';').filter(Boolean)];
const ROOTS = {
  '/wllama3/': fileURLToPath(new URL('./node_modules/@wllama/wllama/esm/', import.meta.url)),
  '/wllama2/': fileURLToPath(new URL('./node_modules/wllama2/esm/', import.meta.url)),
};
if (ENGINES.some((e) => e.startsWith('wllama')) && !Object.values(ROOTS).every(existsSync)) {
  console.error('chromium.mjs: run `npm ci` in glue/bench first (wllama)'); process.exit(1);
}
if (ENGINES.some((e) => e.startsWith('wasmind')) && !existsSync(fileURLToPath(new URL('../../dist/wasmind-mt.wasm', import.meta.url)))) {
  console.error('chromium.mjs: build dist/ first (`cargo xtask dist`)'); process.exit(1);
}
if (!existsSync(CHROMIUM)) { console.error(`chromium.mjs: ${CHROMIUM} missing: apt-get install -y chromium (or set CHROMIUM)`); process.exit(1); }

const PAGE = `<!doctype html><meta charset="utf-8"><script type="module">
// wasmind: the low-level glue in a module Worker (browser-worker.mjs).
function runWasmind({ threads, relaxed, prompt, longPrompt, gen, reps }) {
  return new Promise((ok, fail) => {
    const w = new Worker('/glue/bench/browser-worker.mjs', { type: 'module' });
    w.onmessage = ({ data }) => { w.terminate(); data.error ? fail(new Error(data.error)) : ok(data); };
    w.onerror = (e) => { w.terminate(); fail(new Error(e.message ?? 'worker failed')); };
    w.postMessage({ threads, relaxed, prompt, longPrompt, gen, reps });
  });
}
const wallMs = async (f) => { const t = performance.now(); await f(); return performance.now() - t; };
// wllama 3.x: llama-server's completion loop; prefill and decode from llama.cpp's own timings.
async function runWllama3({ threads, prompt, longPrompt, gen, reps }) {
  const { Wllama } = await import('/wllama3/index.js');
  const w = new Wllama({ default: location.origin + '/wllama3/wasm/wllama.wasm' }, { suppressNativeLog: true });
  const blob = await (await fetch('/model.gguf')).blob();
  await w.loadModel([blob], { n_ctx: 2048, n_batch: 512, ...(threads > 0 ? { n_threads: threads } : {}) });
  const complete = (p, n) => w.createCompletion({ prompt: p, max_tokens: n, temp: 0, top_k: 1, ignore_eos: true, cache_prompt: false, seed: 1 });
  const pre = [], dec = [], ttft = [];
  let promptN = 0, longN = 0;
  for (let rep = 0; rep <= reps; rep++) {
    const r = await complete(prompt, rep === 0 ? 8 : gen);
    if (rep > 0) { pre.push(r.timings.prompt_per_second); dec.push(r.timings.predicted_per_second); promptN = r.timings.prompt_n; }
  }
  if (longPrompt) { let r; ttft.push(await wallMs(async () => { r = await complete(longPrompt, 1); })); longN = r.timings.prompt_n; }
  const info = { multithread: w.isMultithread(), n_threads: w.getNumThreads(), llama_cpp: Wllama.getLibllamaVersion?.() };
  await w.exit();
  return { info, pre, dec, ttft, prompt_tokens: promptN, long_prompt_tokens: longN };
}
// wllama 2.x: its low-level calls, timed here: decode(prompt) as one batch, then per token
// samplingSample (greedy) + samplingAccept + decode([token]).
async function runWllama2({ threads, prompt, longPrompt, gen, reps }) {
  const { Wllama } = await import('/wllama2/index.js');
  const base = location.origin + '/wllama2/';
  const w = new Wllama({ 'single-thread/wllama.wasm': base + 'single-thread/wllama.wasm',
    'multi-thread/wllama.wasm': base + 'multi-thread/wllama.wasm' }, { suppressNativeLog: true });
  const blob = await (await fetch('/model.gguf')).blob();
  await w.loadModel([blob], { n_ctx: 2048, n_batch: 512, ...(threads > 0 ? { n_threads: threads } : {}) });
  const ids = await w.tokenize(prompt, true);
  const pre = [], dec = [], ttft = [];
  for (let rep = 0; rep <= reps; rep++) {
    await w.kvClear();
    await w.samplingInit({ temp: 0, top_k: 1 });
    const prefillMs = await wallMs(() => w.decode(ids, {}));
    const n = rep === 0 ? 8 : gen;
    const decodeMs = await wallMs(async () => {
      for (let i = 0; i < n; i++) {
        const { token } = await w.samplingSample();
        await w.samplingAccept([token]);
        await w.decode([token], {});
      }
    });
    if (rep > 0) { pre.push(ids.length / prefillMs * 1000); dec.push(n / decodeMs * 1000); }
  }
  let longN = 0;
  if (longPrompt) {
    const longIds = await w.tokenize(longPrompt, true);
    longN = longIds.length;
    await w.kvClear();
    await w.samplingInit({ temp: 0, top_k: 1 });
    ttft.push(await wallMs(async () => { await w.decode(longIds, {}); await w.samplingSample(); }));
  }
  const info = { multithread: w.isMultithread(), n_threads: w.getNumThreads(), llama_cpp: '2.4.0' };
  await w.exit();
  return { info, pre, dec, ttft, prompt_tokens: ids.length, long_prompt_tokens: longN };
}
window.runBench = async (engine, a) => {
  if (engine.startsWith('wasmind')) {
    // wasmind: the build the glue picks (relaxed SIMD in Chromium); wasmind-simd128: SIMD128 only.
    const r = await runWasmind({ ...a, relaxed: engine === 'wasmind-simd128' ? false : undefined });
    return { ...r, pre: r.prefill_all, dec: r.decode_all, ttft: r.ttft_all ?? [],
      info: { multithread: r.threaded, n_threads: Math.max(1, a.threads) }, isolated: crossOriginIsolated };
  }
  const r = await (engine === 'wllama2' ? runWllama2 : runWllama3)(a);
  return { ...r, isolated: crossOriginIsolated };
};
window.ready = true;
</script>`;

/** Chromium's renderer processes now: pid -> peak resident kB (VmHWM). */
function renderers() {
  const out = new Map();
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      if (!cmd.includes('--type=renderer')) continue;
      const hwm = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
      if (hwm) out.set(pid, Number(hwm[1]));
    } catch { /* gone */ }
  }
  return out;
}

const MODULE = {
  wasmind: (r, t) => moduleFile(t !== 0, r.relaxed),
  'wasmind-simd128': (r, t) => moduleFile(t !== 0, r.relaxed),
  wllama2: (r) => `wllama 2.4.0 (${r.info.multithread ? 'multi' : 'single'}-thread runtime)`,
  wllama3: (r) => `wllama 3.13.0 (${r.info.multithread ? 'multi' : 'single'}-thread runtime)`,
};

const { chromium } = await import('playwright-core');
const server = await serve({ port: 0, mounts: ROOTS, files: { '/model.gguf': MODEL } , pages: { '/bench.html': PAGE } });
const browser = await chromium.launch({ executablePath: CHROMIUM, args: FLAGS });
const runs = new Map(); // "engine threads" -> results of each round
try {
  for (let round = 0; round < ROUNDS; round++) for (const threads of THREADS) for (const engine of ENGINES) {
    const before = renderers();
    const context = await browser.newContext();
    const page = await context.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(e.message));
    page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
    await page.goto(`http://127.0.0.1:${server.address().port}/bench.html${threads === 0 ? '?isolated=0' : ''}`);
    await page.waitForFunction(() => window.ready, null, { timeout: 60000 });
    const key = `${engine} ${threads}`;
    if (!runs.has(key)) runs.set(key, []);
    try {
      const r = await page.evaluate(([e, a]) => window.runBench(e, a), [engine, { threads, prompt: PROMPT, longPrompt: LONG, gen: GEN, reps: REPS }]);
      const peak = [...renderers()].filter(([pid]) => !before.has(pid)).reduce((s, [, kb]) => s + kb, 0);
      runs.get(key).push({ ...r, peak_rss_mb: peak / 1024, loadavg: loadavg()[0] });
      console.error(`chromium.mjs: round ${round + 1} ${key}: prefill ${Math.max(...r.pre).toFixed(1)}, decode ${Math.max(...r.dec).toFixed(1)} tok/s, ttft ${r.ttft.length ? Math.min(...r.ttft).toFixed(0) : '—'} ms, peak ${(peak / 1024).toFixed(0)} MB`);
    } catch (e) {
      runs.get(key).push({ error: String(e.message ?? e).slice(0, 400), page_errors: errors.slice(0, 5) });
    }
    await context.close();
  }
} finally {
  await browser.close();
  server.close();
}

for (const [key, rounds] of runs) {
  const [engine, t] = key.split(' '), threads = Number(t);
  const ok = rounds.filter((r) => !r.error);
  const base = { engine: 'chromium', browser_engine: engine, bench: 'llm', requested_threads: threads };
  if (!ok.length) { console.log(JSON.stringify({ ...base, error: rounds[0]?.error, page_errors: rounds[0]?.page_errors })); continue; }
  const pre = ok.flatMap((r) => r.pre), dec = ok.flatMap((r) => r.dec), ttft = ok.flatMap((r) => r.ttft);
  const r = ok[0];
  console.log(JSON.stringify({
    ...base, module: MODULE[engine](r, threads), threads: r.info.n_threads, isolated: r.isolated,
    prompt_tokens: r.prompt_tokens, gen_tokens: GEN, reps: REPS, rounds: ok.length,
    prefill_tok_s: Math.max(...pre), prefill_tok_s_median: median(pre),
    decode_tok_s: Math.max(...dec), decode_tok_s_median: median(dec),
    long_prompt_tokens: r.long_prompt_tokens, ttft_ms: ttft.length ? Math.min(...ttft) : null,
    peak_rss_mb: Math.max(...ok.map((x) => x.peak_rss_mb)),
    ...(r.stream_gb_s ? {
      stream_gb_s: Math.max(...ok.map((x) => x.stream_gb_s)), weight_bytes_per_token: r.weight_bytes_per_token,
      decode_ceiling_tok_s: Math.max(...ok.map((x) => x.decode_ceiling_tok_s)),
      decode_of_ceiling: Math.max(...dec) / Math.max(...ok.map((x) => x.decode_ceiling_tok_s)),
    } : {}),
    prefill_all: pre, decode_all: dec, ttft_all: ttft, loadavg: Math.max(...ok.map((x) => x.loadavg)),
  }));
}
