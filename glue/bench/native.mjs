// native.mjs: the native peer — llama.cpp itself, prebuilt for x64 (the CPU variant it picks at
// run time, AVX2 here) inside the npm package node-llama-cpp — on the same model, prompt and
// token counts as the wasm benches. One JSON object per line. `cargo xtask bench` runs it.
//
//   node glue/bench/native.mjs llm      --model M.gguf --prompt-file P.txt [--gen 128] [--threads 1,2,4,8] [--reps 3]
//   node glue/bench/native.mjs tokenize --model M.gguf --texts T.json [--min-secs 1]
//   node glue/bench/native.mjs embed    --model E.gguf --texts T.json --set NAME [--threads 1,2] [--min-secs 1]
//
// Prefill: the prompt evaluated as one batch (evaluateWithoutGeneratingNewTokens). Decode: greedy
// (temperature 0) generation of --gen tokens after it, through the sequence's token generator.
// Tokenize: model.tokenize(text) per text (includes the N-API call per text). Embed: a sentence
// encoder's getEmbeddingFor(text) per text (tokenizing included, as in wasmind's embed).
import { readFile } from 'node:fs/promises';
import { loadavg } from 'node:os';
import { getLlama, LlamaLogLevel } from 'node-llama-cpp';

const [cmd, ...rest] = process.argv.slice(2);
const opt = (name, dflt) => { const i = rest.indexOf(name); return i >= 0 ? rest[i + 1] : dflt; };
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const now = () => performance.now() / 1000;
const emit = (v) => console.log(JSON.stringify({ ...v, engine: 'native', loadavg: loadavg()[0] }));

const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: opt('--model') });
const build = `llama.cpp via node-llama-cpp (${llama.buildType}; ${llama.systemInfo.trim()})`;

async function llm() {
  const prompt = await readFile(opt('--prompt-file'), 'utf8');
  const gen = Number(opt('--gen', 128)), reps = Number(opt('--reps', 3));
  const ids = model.tokenize(prompt, true); // special tokens in the text are parsed, as wasmind's flag 2
  for (const threads of opt('--threads', '1,2,4,8').split(',').map(Number)) {
    const ctx = await model.createContext({ contextSize: 1024, batchSize: 512, threads, sequences: 1 });
    const seq = ctx.getSequence();
    const pre = [], dec = [];
    let generated = [];
    for (let rep = 0; rep <= reps; rep++) {
      await seq.clearHistory();
      let t0 = now();
      await seq.evaluateWithoutGeneratingNewTokens(ids);
      const prefillS = now() - t0;
      const genNow = rep === 0 ? 8 : gen, out = [];
      t0 = now();
      // The last prompt token is evaluated again to get logits to sample from (the prefill above
      // keeps none); it is one extra token of work, counted against native's decode time.
      for await (const t of seq.evaluate([ids[ids.length - 1]], { temperature: 0 })) {
        out.push(t);
        if (out.length >= genNow) break;
      }
      const decodeS = now() - t0;
      if (rep > 0) { pre.push(ids.length / prefillS); dec.push(genNow / decodeS); generated = out; }
    }
    emit({
      bench: 'llm', module: build, threads, prompt_tokens: ids.length, gen_tokens: gen, reps,
      prefill_tok_s: Math.max(...pre), prefill_tok_s_median: median(pre),
      decode_tok_s: Math.max(...dec), decode_tok_s_median: median(dec),
      prefill_all: pre, decode_all: dec, generated_head: generated.slice(0, 16),
    });
    await ctx.dispose();
  }
}

async function tokenize() {
  const texts = JSON.parse(await readFile(opt('--texts'), 'utf8'));
  const minSecs = Number(opt('--min-secs', 1));
  const pass = () => { let n = 0; for (const t of texts) n += model.tokenize(t).length; return n; };
  const ids = pass();
  const times = [], start = now();
  while (times.length < 3 || now() - start < minSecs) { const t = now(); pass(); times.push(now() - t); }
  const bytes = texts.reduce((a, t) => a + Buffer.byteLength(t), 0), best = Math.min(...times), med = median(times);
  emit({ bench: 'tokenize', module: build, ids, texts: texts.length, bytes, passes: times.length,
    texts_per_s: texts.length / best, mb_per_s: bytes / best / 1e6, mb_per_s_median: bytes / med / 1e6 });
}

// A sentence encoder (a BERT GGUF): one text per call, as wasmind's `embed`, per thread count.
async function embed() {
  const texts = JSON.parse(await readFile(opt('--texts'), 'utf8'));
  const set = opt('--set', 'texts'), minSecs = Number(opt('--min-secs', 1));
  const bytes = texts.reduce((a, t) => a + Buffer.byteLength(t), 0);
  for (const threads of opt('--threads', '1,2').split(',').map(Number)) {
    const ctx = await model.createEmbeddingContext({ contextSize: 512, batchSize: 512, threads });
    const pass = async () => { for (const t of texts) await ctx.getEmbeddingFor(t); };
    await pass();
    const times = [], start = now();
    while (times.length < 3 || now() - start < minSecs) { const t = now(); await pass(); times.push(now() - t); }
    const best = Math.min(...times), med = median(times);
    emit({ bench: 'embed', api: 'embed', set, module: build, threads, texts: texts.length, bytes, passes: times.length,
      texts_per_s: texts.length / best, mb_per_s: bytes / best / 1e6, texts_per_s_median: texts.length / med, mb_per_s_median: bytes / med / 1e6 });
    await ctx.dispose();
  }
}

if (cmd === 'llm') await llm();
else if (cmd === 'tokenize') await tokenize();
else if (cmd === 'embed') await embed();
else { console.error('usage: native.mjs (llm | tokenize | embed) [options]'); process.exit(2); }
await model.dispose();
await llama.dispose();
