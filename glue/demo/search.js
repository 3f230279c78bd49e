// The semantic-search page: sentence vectors of a small corpus (corpus.json), and of the query
// as it is typed; the top five by cosine (the vectors are unit length: a dot product). The
// embedder: potion-base-8M (Model2Vec), or ?embedder=URL (a Model2Vec folder or an encoder .gguf).
// State for tests: window.wasmindSearch = { ready, query, results: [{ text, score }], error }.
import { Wasmind } from '../index.js';

const $ = (id) => document.getElementById(id);
const params = Object.fromEntries(new URLSearchParams(location.search));
const state = window.wasmindSearch = { ready: false, results: [] };
if ('serviceWorker' in navigator) navigator.serviceWorker.register('./sw.js').catch((e) => console.warn('no service worker', e));

const dot = (a, b) => { let s = 0; for (let i = 0; i < a.length; i++) s += a[i] * b[i]; return s; };

try {
  const t0 = performance.now();
  const docs = await (await fetch('corpus.json')).json();
  const ai = await Wasmind.create({ threads: params.threads ? Number(params.threads) : undefined });
  await ai.loadEmbedder(params.embedder ?? '/models/potion-base-8M/');
  const vectors = await ai.embed(docs);
  $('count').textContent = docs.length;
  $('status').textContent = `${docs.length} sentences embedded in ${(performance.now() - t0).toFixed(0)} ms ` +
    `(${ai.threaded ? `${ai.threads} threads` : 'single-threaded'}).`;
  let pending = null, running = false;
  const search = async () => {
    if (running) return;
    running = true;
    while (pending !== null) {
      const query = pending; pending = null;
      const results = [];
      if (query.trim()) {
        const t = performance.now();
        const q = await ai.embed(query);
        docs.forEach((text, i) => results.push({ text, score: dot(q, vectors[i]) }));
        results.sort((a, b) => b.score - a.score).splice(5);
        $('status').textContent = `query embedded and ranked in ${(performance.now() - t).toFixed(1)} ms`;
      }
      Object.assign(state, { query, results });
      $('results').replaceChildren(...results.map((r) => {
        const li = document.createElement('li');
        li.append(Object.assign(document.createElement('span'), { className: 'score', textContent: r.score.toFixed(3) }), r.text);
        return li;
      }));
    }
    running = false;
  };
  $('q').oninput = () => { pending = $('q').value; search(); };
  $('q').disabled = false; $('q').focus();
  state.ready = true;
  if (params.q) { $('q').value = params.q; $('q').oninput(); }
} catch (e) {
  state.error = `${e.status ? `${e.status}: ` : ''}${e.message}`;
  $('status').textContent = state.error;
}
