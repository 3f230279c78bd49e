// The chat page, on glue/index.js from the page's main thread: pick a model (a preset, a URL, a
// file), watch it download, chat with streamed replies, Stop, tokens/s, delete the cached copy.
// State for tests: window.wasmindChat = { ready, info, threaded, threads, replies: [{ text, stats }], error }.
import { Wasmind } from '../index.js';

const $ = (id) => document.getElementById(id);
const params = Object.fromEntries(new URLSearchParams(location.search));
const state = window.wasmindChat = { ready: false, replies: [] };
const sampling = { temperature: params.temp !== undefined ? Number(params.temp) : 0.2, maxTokens: 512 };
if (sampling.temperature === 0) sampling.repeatPenalty = 1;
let ai = null, history = [], modelUrl = null, busy = false;

if ('serviceWorker' in navigator) navigator.serviceWorker.register('./sw.js').catch((e) => console.warn('no service worker', e));

const fail = (e) => { state.error = `${e.status ? `${e.status}: ` : ''}${e.message}`; $('status').textContent = state.error; busy = false; };
const mb = (n) => `${(n / 1e6).toFixed(1)} MB`;

async function loadModel(source, label) {
  if (busy) return;
  busy = true; state.ready = false;
  $('text').disabled = $('send').disabled = true;
  try {
    ai ??= await Wasmind.create({ threads: params.threads ? Number(params.threads) : undefined });
    $('status').textContent = `loading ${label}…`;
    const t0 = performance.now();
    const info = await ai.load(source, { context: Number(params.ctx ?? 2048), onProgress: ({ loaded, total }) => {
      $('progress').value = total ? loaded / total : 0;
      $('status').textContent = `loading ${label}: ${mb(loaded)} of ${total ? mb(total) : '?'}`;
    } });
    modelUrl = typeof source === 'string' ? source : null;
    history = [];
    $('log').textContent = '';
    Object.assign(state, { ready: true, info, threaded: ai.threaded, threads: ai.threads });
    $('status').textContent = `${info.name}: ${ai.threaded ? `${ai.threads} threads` : 'single-threaded (page not cross-origin isolated)'}, ` +
      `${info.chat_template} template, context ${info.context}; ${info.fromCache ? 'from the cache' : 'downloaded'} in ${((performance.now() - t0) / 1000).toFixed(1)} s`;
    $('text').disabled = $('send').disabled = false; $('text').focus();
  } catch (e) { fail(e); }
  busy = false;
}

$('form').onsubmit = async (e) => {
  e.preventDefault();
  const text = $('text').value.trim();
  if (!text || busy || !state.ready) return;
  busy = true; $('text').value = '';
  $('log').append(Object.assign(document.createElement('div'), { className: 'user', textContent: `> ${text}` }));
  const node = $('log').appendChild(document.createElement('div'));
  $('text').disabled = $('send').disabled = true; $('stop').disabled = false;
  history.push({ role: 'user', content: text });
  let reply = '';
  try {
    // A long conversation loses its oldest turns rather than ending in CONTEXT_FULL.
    for await (const piece of ai.chat(history, { ...sampling, dropOldest: true })) { reply += piece; node.textContent += piece; }
    history.push({ role: 'assistant', content: reply });
    const s = ai.stats();
    state.replies.push({ text: reply, stats: s });
    $('log').append(Object.assign(document.createElement('div'), { className: 'stats',
      textContent: `[${s.promptTokens} prompt tokens at ${s.prefillTps.toFixed(0)} tok/s, ${s.tokens} reply tokens at ` +
        `${s.decodeTps.toFixed(1)} tok/s, ${ai.threads} thread${ai.threads > 1 ? 's' : ''}; ${s.state}]` }));
  } catch (err) { fail(err); }
  busy = false;
  $('text').disabled = $('send').disabled = false; $('stop').disabled = true; $('text').focus();
};
$('stop').onclick = () => ai?.stop();
$('new').onclick = () => { history = []; $('log').textContent = ''; };
$('load').onclick = () => {
  const f = $('file').files[0];
  if (f) loadModel(f, f.name); else loadModel($('url').value.trim() || $('preset').value, $('url').value.trim() || $('preset').selectedOptions[0].text);
};
$('delete').onclick = async () => {
  const url = modelUrl ?? ($('url').value.trim() || $('preset').value);
  const had = await Wasmind.deleteCached(url);
  $('status').textContent = had ? `deleted the cached copy of ${url}` : `no cached copy of ${url}`;
};

const first = params.model ?? $('preset').value;
loadModel(first, first.split('/').pop());
