// The chat page: never blocks. The driver (chat-worker.js) runs in a module Worker; the page sends
// it messages and shows the reply as its pieces arrive. Stop stores 1 at the module's stop flag in
// the shared memory (threaded module); the single-threaded fallback cannot be stopped mid-reply.
// State for tests: window.wasmindChat = { ready, info, threaded, threads, replies: [{ text, stats }] }.
const $ = (id) => document.getElementById(id);
const params = Object.fromEntries(new URLSearchParams(location.search));
const state = window.wasmindChat = { ready: false, replies: [] };
let stopFlag = null, current = null;

const worker = new Worker(new URL('./chat-worker.js', import.meta.url), { type: 'module', name: 'wasmind-driver' });
worker.onerror = (e) => { state.error = e.message ?? 'worker failed'; $('status').textContent = state.error; };
worker.onmessage = ({ data: m }) => {
  if (m.type === 'ready') {
    Object.assign(state, { ready: true, info: m.info, threaded: m.threaded, threads: m.threads });
    stopFlag = m.stopFlag;
    $('status').textContent = `${m.info.name}: ${m.threaded ? `${m.threads} threads` : 'single-threaded'}, ` +
      `${m.info.chat_template} template, context ${m.info.context}`;
    $('text').disabled = $('send').disabled = false; $('text').focus();
  } else if (m.type === 'piece') {
    current.text += m.text; current.node.textContent += m.text;
  } else if (m.type === 'done') {
    current.stats = m.stats; state.replies.push({ text: current.text, stats: m.stats });
    const s = m.stats;
    $('log').append(Object.assign(document.createElement('div'), { className: 'stats',
      textContent: `[${s.prompt_tokens} prompt tokens at ${s.prefill_tps.toFixed(0)} tok/s, ` +
        `${s.tokens} reply tokens at ${s.decode_tps.toFixed(1)} tok/s; ${s.state}]` }));
    current = null; $('text').disabled = $('send').disabled = false; $('stop').disabled = true; $('text').focus();
  } else if (m.type === 'error') {
    state.error = m.error; $('status').textContent = m.error;
  }
};

$('form').onsubmit = (e) => {
  e.preventDefault();
  const text = $('text').value.trim();
  if (!text || current) return;
  $('text').value = '';
  $('log').append(Object.assign(document.createElement('div'), { className: 'user', textContent: `> ${text}` }));
  current = { text: '', node: $('log').appendChild(document.createElement('div')) };
  $('text').disabled = $('send').disabled = true; $('stop').disabled = !stopFlag;
  worker.postMessage({ type: 'user', text });
};
$('stop').onclick = () => {
  if (stopFlag) Atomics.store(new Int32Array(stopFlag.memory.buffer), stopFlag.index, 1);
};

worker.postMessage({ type: 'load', model: params.model ?? '/models/SmolLM2-135M-Instruct.Q4_1.gguf',
  threads: params.threads ? Number(params.threads) : undefined, context: Number(params.ctx ?? 2048),
  temperature: params.temp !== undefined ? Number(params.temp) : undefined });
