// Types of glue/index.js, the page API of wasmind.

/** A Hugging Face URL, any URL, a File/Blob, or the bytes of the file. */
export type Source = string | URL | Blob | ArrayBuffer | ArrayBufferView;

/** Options of `create`, `load`, `loadEmbedder` and `chat`: another key, or a value of another
 *  kind (`threads: '2'`, `context: 1.5`), rejects with INVALID_ARGUMENT. */
export interface CreateOptions {
  /** Threads, the driver included (threaded module only). Default: ¾ of the cores, at most 16. */
  threads?: number;
  /** URL of the folder with the .wasm files (wasmind.wasm, wasmind-mt.wasm and their -relaxed
   *  twins). Default: the package's dist/. */
  dist?: string | URL;
  /** Force the single-threaded (false) module. Default: threaded when shared memory is allowed
   *  (a cross-origin isolated page, a Worker of one, or Node). */
  threaded?: boolean;
  /** Force the relaxed-SIMD build (true) or the SIMD128 one (false). Default: relaxed where the
   *  engine runs relaxed SIMD correctly (a probe module is validated and run). */
  relaxed?: boolean;
  /** Milliseconds the driver may take to start and load the module (fetch, compile, helpers)
   *  before `create` rejects with TIMEOUT and its workers are ended (default 60000). */
  startTimeout?: number;
}

export interface Progress {
  /** Bytes written into the module so far. */
  loaded: number;
  /** The file's size. */
  total: number;
}

export interface LoadOptions {
  onProgress?: (progress: Progress) => void;
  /** Keep a URL's file in the origin private file system and reuse it (default true). */
  cache?: boolean;
  /** KV cache length in tokens; 0 = the model's own, at most 4096. */
  context?: number;
  /** The expected size in bytes: a cached copy is checked against it without a HEAD request. */
  size?: number;
  /** Milliseconds a server may send no answer or no bytes before the load rejects with NETWORK
   *  (default 60000). */
  stallTimeout?: number;
  /** Re-quantize weights on load where the module supports it: 'keep' | 'q8_0' or a ggml type id. */
  quantize?: 'keep' | 'q8_0' | number;
  /** Override the chat template: 'chatml' | 'llama3' | 'gemma' | 'llama2' | 'mistral' (or a name the module knows). */
  template?: string;
}

/** model_info() of the module, plus where the bytes came from. */
export interface ModelInfo {
  name: string;
  chat_template: string;
  context: number;
  /** The file's size in bytes. */
  bytes: number;
  /** Served from the cache (no download). */
  fromCache: boolean;
  /** The file is in the cache now. */
  cached: boolean;
  [key: string]: unknown;
}

/** OpenAI's message shape ('developer' is read as 'system'; 'raw' is text added as it is, no
 *  template); text parts are joined. Another role or content rejects with INVALID_ARGUMENT. */
export interface Message {
  role: 'system' | 'developer' | 'user' | 'assistant' | 'raw';
  content: string | { type: 'text'; text: string }[] | null;
}

/** Any other key, or a value of the wrong kind, makes `chat` reject with INVALID_ARGUMENT. */
export interface ChatOptions {
  /** Reply tokens at most; 0 = up to the context. */
  maxTokens?: number;
  /** 0 is greedy. Default: the module's (0.2; `sampler_defaults`). */
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
  repeatPenalty?: number;
  repeatWindow?: number;
  seed?: number;
  /** Stops the reply; the iteration then throws the signal's reason (an AbortError). */
  signal?: AbortSignal;
  /** Output a program can parse: OpenAI's response_format. */
  responseFormat?:
    | { type: 'text' }
    | { type: 'json_object' }
    | { type: 'json_schema'; json_schema: { name?: string; schema: object } }
    | { type: 'json_schema'; schema: object };
  /** A GBNF grammar (llama.cpp's dialect) the reply must follow; wins over responseFormat. */
  grammar?: string;
  /** When a new turn does not fit the context, drop the oldest turns (system messages stay)
   *  instead of rejecting with CONTEXT_FULL. Default false. */
  dropOldest?: boolean;
  /** Let a model that can reason think (Qwen3: no empty <think> block). Default false. */
  think?: boolean;
}

export interface ChatStats {
  promptTokens: number;
  tokens: number;
  prefillTps: number;
  decodeTps: number;
  /** 'eog' (end token), 'limit' (maxTokens), 'stopped', 'context_full'. */
  state: string;
  /** Messages dropped from the conversation so far (`dropOldest`). */
  droppedMessages: number;
}

/** A Model2Vec model's three files. */
export interface EmbedderFiles {
  safetensors: Source;
  tokenizer: Source;
  config: Source;
}

/** A BERT sentence encoder (all-MiniLM, bge, e5, gte) in one GGUF file. */
export interface EmbedderGguf {
  gguf: Source;
}

/** Every failure: `status` is the module's status name (BAD_FORMAT, OUT_OF_MEMORY, NO_MODEL, …)
 *  or NETWORK / HTTP / LENGTH for a download, TIMEOUT for a driver that did not start;
 *  `message` the module's message. */
export class WasmindError extends Error {
  code: number;
  status: string;
}

export const CACHE_NAME: string;

export class Wasmind {
  /** Starts the driver worker (and helpers on a cross-origin isolated page); resolves when ready. */
  static create(options?: CreateOptions): Promise<Wasmind>;
  /** Deletes a cached URL's file, or (no argument) every cached file. */
  static deleteCached(url?: string | URL): Promise<boolean>;
  /** The cached copy of a URL, or null. */
  static cached(url: string | URL): Promise<{ size: number } | null>;

  /** Whether the threaded module runs. */
  readonly threaded: boolean;
  /** Whether the relaxed-SIMD build runs. */
  readonly relaxed: boolean;
  /** Threads in use, the driver included. */
  readonly threads: number;
  /** How the engine compiled the module: 'streaming' (WebAssembly.compileStreaming) or 'bytes'
   *  (Node, or a server without the wasm MIME type); null before create resolves. */
  readonly compiled: 'streaming' | 'bytes' | null;
  /** Where URLs are cached: 'opfs' (the origin private file system), 'cache-api' (engines
   *  without OPFS: WebKitGTK), or null (no cache: Node, an opaque origin). */
  readonly cache: 'opfs' | 'cache-api' | null;
  /** The loaded model's info, or null. */
  readonly model: ModelInfo | null;
  /** The embedder's vector size, or 0. */
  readonly embedDim: number;

  /** Loads a GGUF model (a URL is streamed into the module's memory, never held whole in JS). */
  load(source: Source, options?: LoadOptions): Promise<ModelInfo>;
  /** A reply to OpenAI-shaped messages, piece by piece; a history the module holds is not re-read. */
  chat(messages: Message[], options?: ChatOptions): AsyncGenerator<string, void, undefined>;
  /** Ends the reply in progress within one token. */
  stop(): void;
  /** The last reply's figures, or null. */
  stats(): ChatStats | null;
  /** Forgets the conversation. */
  reset(): Promise<void>;
  /** The token ids in the KV cache and the last sampled id (tests, debugging). */
  tokens(): Promise<{ ids: number[]; last: number }>;
  /** Loads an embedder: a Model2Vec folder URL or its three files, or a BERT sentence encoder
   *  in one GGUF file (a URL ending in .gguf, a Blob, bytes, or { gguf }; its vectors have unit
   *  length). */
  loadEmbedder(source: Source | EmbedderFiles | EmbedderGguf, options?: { cache?: boolean; onProgress?: (p: Progress) => void; stallTimeout?: number }): Promise<{ dim: number }>;
  embed(text: string): Promise<Float32Array>;
  embed(texts: string[]): Promise<Float32Array[]>;
  /** Memory figures of the driver: wasm memory bytes, JS heap where known, the last load's peak. */
  usage(): Promise<{ wasm: number; heap: number | null; peakLoadHeap: number | null; loadHeapBase: number | null; chunkMax: number }>;
  /** Ends every worker and releases the memory; load() starts them again. */
  /** Diagnostics: helper `helper` fails in the next chunk it claims (a lost helper: HELPER_LOST). */
  injectFault(helper: number, kind: 'trap' | 'stall'): Promise<number>;
  unload(): Promise<void>;
}

export default Wasmind;
