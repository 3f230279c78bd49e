// The demos' service worker: keeps the pages, the glue and the modules, so chat.html and
// search.html start with no network once visited. Network first (a changed file is seen at once),
// the cache when the network fails. Model files are not its business: the driver keeps them in
// the origin private file system (glue/source.js), so /models/ and Hugging Face requests, HEAD
// requests and range requests pass straight through.
const CACHE = 'wasmind-demo-v1';
const SHELL = ['chat.html', 'chat.js', 'search.html', 'search.js', 'corpus.json', 'index.html', 'main.js', 'driver.js',
  '../index.js', '../driver.js', '../source.js', '../gguf-split.js', '../wasmind.js', '../worker.js',
  '../../dist/wasmind.wasm', '../../dist/wasmind-mt.wasm',
  '../../dist/wasmind-relaxed.wasm', '../../dist/wasmind-relaxed-mt.wasm'];

self.addEventListener('install', (e) => {
  e.waitUntil(caches.open(CACHE).then((c) => c.addAll(SHELL.map((p) => new Request(new URL(p, self.location).href, { cache: 'reload' })))));
  self.skipWaiting();
});
self.addEventListener('activate', (e) => e.waitUntil(self.clients.claim()));

const passThrough = (req, url) => req.method !== 'GET' || req.headers.has('range') || url.origin !== self.location.origin ||
  url.pathname.startsWith('/models/') || url.pathname.includes('/resolve/') || /\.(gguf|safetensors)$/.test(url.pathname);

self.addEventListener('fetch', (e) => {
  const url = new URL(e.request.url);
  if (passThrough(e.request, url)) return;
  e.respondWith((async () => {
    const cache = await caches.open(CACHE);
    try {
      const r = await fetch(e.request);
      if (r.ok) await cache.put(url.origin + url.pathname, r.clone());
      return r;
    } catch (err) {
      const hit = await cache.match(url.origin + url.pathname);
      // A fresh Response (no URL of its own): Chromium refuses a cached one as a Worker's script.
      if (hit) return new Response(await hit.blob(), { status: hit.status, statusText: hit.statusText, headers: hit.headers });
      throw err;
    }
  })());
});
