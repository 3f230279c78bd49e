// worker.js: one wasmind helper (a Node worker_threads worker or a browser module Worker).
// Gets { module, memory, id, stackTop } from wasmind.js, instantiates the threaded module on the
// shared memory, gives this instance its own stack, says { running }, then serves jobs in
// helper_loop(id) until pool_shutdown, and says { rc } (abi/ABI.md, "Starting helpers").
// A browser helper started by the page for the driver (index.js, driver.js: spawnByPage) first
// gets { wasmindPort }, a MessagePort to the driver, to answer over, then { wasmindRelay }, a
// port on which the driver queued the job.

const isNode = typeof process === 'object' && !!process.versions?.node;
let port = isNode ? (await import('node:worker_threads')).parentPort : globalThis;

async function serve({ module, memory, id, stackTop }) {
  try {
    const { exports } = await WebAssembly.instantiate(module, { env: { memory } });
    exports.__stack_pointer.value = stackTop; // never share the driver's shadow stack
    port.postMessage({ running: true });
    port.postMessage({ rc: exports.helper_loop(id) }); // blocks until pool_shutdown
    if (!isNode) globalThis.close(); // a browser worker ends itself (see driver.js, close)
  } catch (e) {
    // A trap (or a failed start): say so, and end (the driver's next job reports HELPER_LOST).
    port.postMessage({ error: `helper ${id}: ${e?.stack ?? e}` });
    if (!isNode) globalThis.close();
  }
}

const from = port;
const first = ({ data }) => {
  if (data?.wasmindPort) { port = data.wasmindPort; return; }
  from.removeEventListener('message', first);
  if (!data?.wasmindRelay) return serve(data);
  data.wasmindRelay.onmessage = (e) => { data.wasmindRelay.close(); serve(e.data); };
  data.wasmindRelay.onmessageerror = () => port.postMessage({ error: 'the job did not arrive (messageerror)' });
};
from.addEventListener('message', first);
