// wllama.mjs: the peer — llama.cpp compiled to wasm (npm @wllama/wllama) — on the same model and
// prompt, in Debian's headless Chromium (wllama runs in browser workers, not in Node), driven by
// playwright-core. Two releases: 3.13.0 (the current one: llama-server's loop, also built for
// WebGPU) and 2.4.0 (the last 2.x: separate single- and multi-thread wasm builds, low-level
// decode calls). One JSON object per (release, thread count). `cargo xtask bench` runs it.
//
//   node glue/bench/wllama.mjs --model M.gguf --prompt-file P.txt [--gen 128] [--threads 0,1,2] [--reps 3] [--versions 2,3]
//
// 3.x figures are llama.cpp's own timings (prompt_per_second, predicted_per_second); 2.x are
// timed in the page around decode(prompt) and the per-token sample/accept/decode calls. The page
// is served with COOP/COEP (cross-origin isolated) so wllama can use its multi-thread runtime with
// `n_threads`; `--threads 0` serves it without them: wllama's single-thread runtime.
// Needs `npm ci` in glue/bench and Debian's `chromium`.
import { readFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { serve } from '../demo/serve.js';

const args = process.argv.slice(2);
const opt = (name, dflt) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : dflt; };
const MODEL = opt('--model'), PROMPT = await readFile(opt('--prompt-file'), 'utf8');
const GEN = Number(opt('--gen', 128)), REPS = Number(opt('--reps', 3));
const THREADS = opt('--threads', '0,1,2').split(',').map(Number);
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
  '--disable-component-update', '--disable-sync'];
const ROOTS = {
  '/wllama3/': fileURLToPath(new URL('./node_modules/@wllama/wllama/esm/', import.meta.url)),
  '/wllama2/': fileURLToPath(new URL('./node_modules/wllama2/esm/', import.meta.url)),
};
const VERSIONS = opt('--versions', '2,3').split(',').map(Number);
if (!Object.values(ROOTS).every(existsSync)) { console.error('wllama.mjs: run `npm ci` in glue/bench first'); process.exit(1); }

const PAGE = `<!doctype html><meta charset="utf-8"><script type="module">
import { Wllama as Wllama3 } from '/wllama3/index.js';
import { Wllama as Wllama2 } from '/wllama2/index.js';
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
// wllama 3.x: llama-server's completion loop; timings are llama.cpp's own.
async function run3({ threads, prompt, gen, reps }) {
  const w = new Wllama3({ default: location.origin + '/wllama3/wasm/wllama.wasm' }, { suppressNativeLog: true });
  const blob = await (await fetch('/model.gguf')).blob();
  await w.loadModel([blob], { n_ctx: 1024, n_batch: 512, ...(threads > 0 ? { n_threads: threads } : {}) });
  const pre = [], dec = [];
  let promptN = 0, genN = 0;
  for (let rep = 0; rep <= reps; rep++) {
    const r = await w.createCompletion({ prompt, max_tokens: rep === 0 ? 8 : gen, temp: 0, top_k: 1,
      ignore_eos: true, cache_prompt: false, seed: 1 });
    if (rep > 0) { pre.push(r.timings.prompt_per_second); dec.push(r.timings.predicted_per_second); promptN = r.timings.prompt_n; genN = r.timings.predicted_n; }
  }
  const info = { multithread: w.isMultithread(), n_threads: w.getNumThreads(), version: Wllama3.getLibllamaVersion?.() };
  await w.exit();
  return { info, pre, dec, promptN, genN };
}
// wllama 2.x: its low-level calls, timed here: decode(prompt) as one batch, then per token
// samplingSample (greedy) + samplingAccept + decode([token]).
async function run2({ threads, prompt, gen, reps }) {
  const base = location.origin + '/wllama2/';
  const w = new Wllama2({ 'single-thread/wllama.wasm': base + 'single-thread/wllama.wasm',
    'multi-thread/wllama.wasm': base + 'multi-thread/wllama.wasm' }, { suppressNativeLog: true });
  const blob = await (await fetch('/model.gguf')).blob();
  await w.loadModel([blob], { n_ctx: 1024, n_batch: 512, ...(threads > 0 ? { n_threads: threads } : {}) });
  const ids = await w.tokenize(prompt, true);
  const pre = [], dec = [];
  for (let rep = 0; rep <= reps; rep++) {
    await w.kvClear();
    await w.samplingInit({ temp: 0, top_k: 1 });
    let t = performance.now();
    await w.decode(ids, {});
    const prefillMs = performance.now() - t;
    const n = rep === 0 ? 8 : gen;
    t = performance.now();
    for (let i = 0; i < n; i++) {
      const { token } = await w.samplingSample();
      await w.samplingAccept([token]);
      await w.decode([token], {});
    }
    const decodeMs = performance.now() - t;
    if (rep > 0) { pre.push(ids.length / prefillMs * 1000); dec.push(n / decodeMs * 1000); }
  }
  const info = { multithread: w.isMultithread(), n_threads: w.getNumThreads(), version: '2.4.0' };
  await w.exit();
  return { info, pre, dec, promptN: ids.length, genN: gen };
}
window.runBench = async (a) => {
  const r = await (a.version === 2 ? run2 : run3)(a);
  return { ...r, isolated: crossOriginIsolated };
};
window.ready = true;
</script>`;

const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const { chromium } = await import('playwright-core');
const server = await serve({ port: 0, mounts: ROOTS, files: { '/model.gguf': MODEL }, pages: { '/': PAGE } });
const browser = await chromium.launch({ executablePath: CHROMIUM, args: FLAGS });
try {
  for (const version of VERSIONS) for (const threads of THREADS) {
    const page = await browser.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(e.message));
    page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
    const q = threads === 0 ? '?isolated=0' : '';
    await page.goto(`http://127.0.0.1:${server.address().port}/${q}`);
    await page.waitForFunction(() => window.ready, null, { timeout: 60000 });
    let r;
    try {
      r = await page.evaluate((a) => window.runBench(a), { version, threads, prompt: PROMPT, gen: GEN, reps: REPS });
    } catch (e) {
      console.log(JSON.stringify({ engine: 'wllama', bench: 'llm', wllama: version, threads, error: String(e.message ?? e).slice(0, 400), page_errors: errors.slice(0, 5) }));
      await page.close();
      continue;
    }
    const runtime = r.info.multithread ? 'multi-thread' : 'single-thread';
    console.log(JSON.stringify({
      engine: 'wllama', bench: 'llm', wllama: version, module: `wllama ${version === 2 ? '2.4.0' : '3.13.0'} (${runtime} runtime${r.isolated ? '' : ', page not isolated'})`,
      threads: r.info.n_threads, requested_threads: threads, isolated: r.isolated, llama_cpp: r.info.version,
      prompt_tokens: r.promptN, gen_tokens: r.genN, reps: REPS,
      prefill_tok_s: Math.max(...r.pre), prefill_tok_s_median: median(r.pre),
      decode_tok_s: Math.max(...r.dec), decode_tok_s_median: median(r.dec),
      prefill_all: r.pre, decode_all: r.dec, loadavg: loadavg()[0],
    }));
    await page.close();
  }
} finally {
  await browser.close();
  server.close();
}
