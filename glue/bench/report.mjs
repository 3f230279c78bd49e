// report.mjs: inputs and tables for `cargo xtask bench`.
//
//   node glue/bench/report.mjs inputs CORPUS.json OUT.json   short sentences cut from the corpus
//   node glue/bench/report.mjs first IN.json N OUT.json      the first N texts of IN
//   node glue/bench/report.mjs report DIR [DIST]             tables from DIR/{llm,llm-*,grammar,tokenize,embed,encoder}.json
//                                                            (and the sizes of DIST's modules, raw and gzipped),
//                                                            also written to DIR/report.md
//
// Every ratio compares engines measured in the same run. Figures are the best pass (the median
// is in the JSON): on a shared 2-core machine the best pass is the least disturbed one.
import { readFile, writeFile } from 'node:fs/promises';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { GZIP_BUDGET, moduleSizes } from './sizes.mjs';

const [cmd, a, b] = process.argv.slice(2);

/** Sentences of 16..=120 bytes from the corpus texts, first occurrence order, deduplicated. */
async function inputs(corpusPath, outPath) {
  const corpus = JSON.parse(await readFile(corpusPath, 'utf8'));
  const seen = new Set(), out = [];
  for (const text of corpus) {
    for (const piece of text.split(/(?<=[.!?。！？])\s+|\n+/u)) {
      const s = piece.trim(), n = Buffer.byteLength(s);
      if (n >= 16 && n <= 120 && !seen.has(s)) { seen.add(s); out.push(s); }
    }
  }
  await writeFile(outPath, JSON.stringify(out));
  const bytes = out.reduce((x, s) => x + Buffer.byteLength(s), 0);
  console.log(`${outPath}: ${out.length} short sentences, ${(bytes / out.length).toFixed(1)} bytes on average`);
}

const f = (x, d = 1) => (x == null || !Number.isFinite(x) ? '—' : x >= 1e5 ? `${(x / 1e3).toFixed(0)}k` : x.toFixed(d));
const ratio = (x, y) => (x && y ? `${(x / y).toFixed(2)}×` : '—');
function table(head, rows) {
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  const line = (r) => `| ${r.map((c, i) => String(c).padEnd(w[i])).join(' | ')} |`;
  return [line(head), `|${w.map((n) => '-'.repeat(n + 2)).join('|')}|`, ...rows.map(line)].join('\n');
}
async function results(dir, name) {
  const p = `${dir}/${name}.json`;
  return existsSync(p) ? JSON.parse(await readFile(p, 'utf8')) : [];
}
const ENGINE = { wasmtime: 'wasmind · wasmtime', node: 'wasmind · Node', wazero: 'wasmind · wazero (Go)', native: 'llama.cpp native' };

async function report(dir, dist) {
  const out = [];
  const say = (s = '') => { out.push(s); console.log(s); };

  if (dist) {
    // What a page downloads (glue/bench/sizes.mjs): each module, and each part of it, raw and
    // gzipped, against the gzip budget.
    const mods = moduleSizes(dist);
    const kib = (n) => `${(n / 1024).toFixed(1)} KiB`;
    say('## Modules');
    say();
    say(table(['module', 'bytes', 'KiB', 'gzip bytes (Node zlib, level 9)', 'gzip KiB', `budget ${GZIP_BUDGET / 1000} KB`],
      mods.map((m) => [m.file, m.raw, kib(m.raw), m.gzip, kib(m.gzip), m.gzip <= GZIP_BUDGET ? 'within' : 'OVER'])));
    say();
    const withParts = mods.filter((m) => m.parts);
    if (withParts.length) {
      say("### Parts: KiB raw / gzipped alone (a part's code: its functions in dist/*.symbols.txt)");
      say();
      const names = Object.keys(withParts[0].parts).sort((x, y) => withParts[0].parts[y].gzip - withParts[0].parts[x].gzip);
      for (const m of withParts) for (const n of Object.keys(m.parts)) if (!names.includes(n)) names.push(n);
      const cell = (p) => (p ? `${(p.raw / 1024).toFixed(1)} / ${(p.gzip / 1024).toFixed(1)}` : '—');
      say(table(['part', ...withParts.map((m) => m.file)], names.map((n) => [n, ...withParts.map((m) => cell(m.parts[n]))])));
      say();
    }
  }
  const errors = (rs) => rs.filter((r) => r.error).forEach((r) => say(`(missing: ${r.engine} — ${r.error})`));

  // llm.json: SmolLM2; llm-NAME.json: the shape-real bench models (`bench --models`).
  const llmFiles = ['llm', ...readdirSync(dir).filter((n) => /^llm-.+\.json$/.test(n)).map((n) => n.slice(0, -5)).sort()];
  for (const file of llmFiles) {
    const llm = await results(dir, file);
    if (llm.length) {
      const ok = llm.filter((r) => !r.error);
      const r0 = ok[0] ?? {};
      const model = file === 'llm' ? 'SmolLM2-135M-Instruct Q4_1'
        : `${file.slice(4)} (shape-real, random weights: target/bench-models/${file.slice(4)}.gguf)`;
      say(`## LLM: ${model}, prompt ${r0.prompt_tokens} tokens (batched prefill), greedy decode of ${r0.gen_tokens} tokens` +
        (r0.long_prompt_tokens ? `; time to first token of a ${r0.long_prompt_tokens}-token prompt` : ''));
      say();
      // In the browser, where users run it: wasmind and wllama on the same page server, interleaved.
      // Thread count 0 is the page without COOP/COEP (single-threaded module / runtime). "decode ÷
      // ceiling": decode tok/s over (streaming read GB/s in the module ÷ weight bytes per token).
      const web = ok.filter((r) => r.engine === 'chromium');
      if (web.length) {
        const at = (e, t) => web.find((r) => r.browser_engine === e && r.requested_threads === t);
        const bestWllama = (t, k, low = false) => {
          const xs = ['wllama2', 'wllama3'].map((e) => at(e, t)?.[k]).filter((x) => x != null);
          return xs.length ? (low ? Math.min(...xs) : Math.max(...xs)) : null;
        };
        say('### Chromium (headless, Debian), interleaved rounds, best round');
        say();
        // Native llama.cpp at the same thread count (a different host kind, quoted because issue 13
        // holds browser prefill to it).
        const native = (t) => ok.filter((r) => r.engine === 'native' && r.threads === Math.max(1, t))
          .sort((x, y) => y.prefill_tok_s - x.prefill_tok_s)[0];
        say(table(['engine', 'module', 'threads', 'prefill tok/s', 'decode tok/s', 'decode median', 'TTFT ms', 'peak MB',
          'read GB/s', 'decode ÷ ceiling', 'decode vs 1T', 'prefill / decode vs simd128 build', 'prefill vs best wllama',
          'decode vs best wllama', 'TTFT: best wllama ÷ this', 'prefill vs native', 'load'],
        web.map((r) => {
          const own1 = at(r.browser_engine, 1) ?? at(r.browser_engine, 0), wasmind = r.browser_engine.startsWith('wasmind');
          const simd = r.browser_engine === 'wasmind' ? at('wasmind-simd128', r.requested_threads) : null;
          return [r.browser_engine, r.module, r.requested_threads, f(r.prefill_tok_s), f(r.decode_tok_s), f(r.decode_tok_s_median),
            f(r.ttft_ms, 0), f(r.peak_rss_mb, 0), f(r.stream_gb_s), f(r.decode_of_ceiling, 2), ratio(r.decode_tok_s, own1?.decode_tok_s),
            simd ? `${ratio(r.prefill_tok_s, simd.prefill_tok_s)} / ${ratio(r.decode_tok_s, simd.decode_tok_s)}` : '',
            wasmind ? ratio(r.prefill_tok_s, bestWllama(r.requested_threads, 'prefill_tok_s')) : '',
            wasmind ? ratio(r.decode_tok_s, bestWllama(r.requested_threads, 'decode_tok_s')) : '',
            wasmind ? ratio(bestWllama(r.requested_threads, 'ttft_ms', true), r.ttft_ms) : '',
            wasmind ? ratio(r.prefill_tok_s, native(r.requested_threads)?.prefill_tok_s) : '', f(r.loadavg, 2)];
        })));
        say();
      }
      // wasmind in its other hosts, and native llama.cpp (a different host kind: no wllama ratio).
      const key = (r) => r.threads;
      const peer = (engine, t) => ok.filter((r) => r.engine === engine && Math.max(1, key(r)) === Math.max(1, t))
        .sort((x, y) => y.decode_tok_s - x.decode_tok_s)[0];
      const one = (engine) => ok.filter((r) => r.engine === engine && Math.max(1, key(r)) === 1).sort((x, y) => y.decode_tok_s - x.decode_tok_s)[0];
      const rows = ok.filter((r) => r.engine !== 'chromium').map((r) => {
        const nat = peer('native', key(r)), base = one(r.engine);
        return [ENGINE[r.engine] ?? r.engine, r.module, key(r), f(r.prefill_tok_s), f(r.decode_tok_s), f(r.decode_tok_s_median),
          f(r.ttft_ms, 0), f(r.stream_gb_s), f(r.decode_of_ceiling, 2), ratio(r.decode_tok_s, base?.decode_tok_s), ratio(r.prefill_tok_s, nat?.prefill_tok_s),
          ratio(r.decode_tok_s, nat?.decode_tok_s), f(r.loadavg, 2)];
      });
      say('### Node, wasmtime and native llama.cpp');
      say();
      say(table(['engine', 'module', 'threads', 'prefill tok/s', 'decode tok/s', 'decode median', 'TTFT ms', 'read GB/s', 'decode ÷ ceiling', 'decode vs own 1T',
        'prefill vs native', 'decode vs native', 'load'], rows));
      errors(llm);
      say();
    }
  }

  const gram = await results(dir, 'grammar');
  if (gram.length) {
    const ok = gram.filter((r) => !r.error);
    say(`## Constrained decode: SmolLM2, greedy chat replies of up to ${ok[0]?.gen_tokens} tokens, with and without a grammar (target: ≥ 0.8× unconstrained)`);
    say();
    const none = (r) => ok.find((x) => x.grammar === 'none' && x.threads === r.threads);
    say(table(['engine', 'module', 'threads', 'grammar', 'tokens', 'masked draws', 'decode tok/s', 'decode median', 'vs unconstrained'],
      ok.map((r) => [ENGINE[r.engine] ?? r.engine, r.module, r.threads, r.grammar, r.tokens, r.masked_draws,
        f(r.decode_tok_s), f(r.decode_tok_s_median), ratio(r.decode_tok_s, none(r)?.decode_tok_s)])));
    errors(gram);
    say();
  }

  const tok = await results(dir, 'tokenize');
  if (tok.length) {
    const ok = tok.filter((r) => !r.error), nat = ok.find((r) => r.engine === 'native');
    say(`## Tokenizer: ${ok[0]?.texts} corpus texts (${ok[0]?.bytes} bytes), SmolLM2 vocabulary, one thread`);
    say();
    say(table(['engine', 'module', 'ids', 'MB/s', 'MB/s median', 'vs native llama.cpp'],
      ok.map((r) => [ENGINE[r.engine] ?? r.engine, r.module, r.ids, f(r.mb_per_s, 2), f(r.mb_per_s_median, 2), ratio(r.mb_per_s, nat?.mb_per_s)])));
    errors(tok);
    say();
  }

  const emb = await results(dir, 'embed');
  if (emb.length) {
    const ok = emb.filter((r) => !r.error);
    say('## Model2Vec embeddings: potion-base-8M (F32 table, 29,528 × 256)');
    for (const set of [...new Set(ok.map((r) => r.set))]) {
      const rs = ok.filter((r) => r.set === set), rust = rs.find((r) => r.engine === 'model2vec-rs'), py = rs.find((r) => r.engine === 'model2vec-py');
      say();
      say(`### ${set}: ${rs[0].texts} texts, ${rs[0].bytes} bytes (${(rs[0].bytes / rs[0].texts).toFixed(1)} per text)`);
      say();
      say(table(['engine', 'module', 'api', 'threads', 'texts/s', 'MB/s', 'texts/s median', 'vs model2vec-rs (1T)', 'vs model2vec (Python)'],
        rs.map((r) => [ENGINE[r.engine] ?? r.engine, r.module, r.api, r.threads ?? '', f(r.texts_per_s, 0), f(r.mb_per_s, 2), f(r.texts_per_s_median, 0),
          ratio(r.texts_per_s, rust?.texts_per_s), ratio(r.texts_per_s, py?.texts_per_s)])));
    }
    errors(emb);
    say();
  }
  const enc = await results(dir, 'encoder');
  if (enc.length) {
    const ok = enc.filter((r) => !r.error);
    say('## Sentence encoder: all-MiniLM-L6-v2 (F16 GGUF; 6 layers, dim 384), `embed` one text per call');
    for (const set of [...new Set(ok.map((r) => r.set))]) {
      const rs = ok.filter((r) => r.set === set), nat = (t) => rs.find((r) => r.engine === 'native' && r.threads === t);
      say();
      say(`### ${set}: ${rs[0].texts} texts, ${rs[0].bytes} bytes (${(rs[0].bytes / rs[0].texts).toFixed(1)} per text)`);
      say();
      say(table(['engine', 'module', 'threads', 'texts/s', 'texts/s median', 'vs native llama.cpp (same threads)'],
        rs.map((r) => [ENGINE[r.engine] ?? r.engine, r.module, r.threads, f(r.texts_per_s, 1), f(r.texts_per_s_median, 1),
          ratio(r.texts_per_s, nat(r.threads)?.texts_per_s)])));
    }
    errors(enc);
    say();
  }
  await writeFile(`${dir}/report.md`, out.join('\n') + '\n');
}

if (cmd === 'inputs') await inputs(a, b);
else if (cmd === 'first') await writeFile(process.argv[5], JSON.stringify(JSON.parse(await readFile(a, 'utf8')).slice(0, Number(b))));
else if (cmd === 'report') await report(a, b);
else { console.error('usage: report.mjs inputs CORPUS OUT | first IN N OUT | report DIR'); process.exit(2); }
