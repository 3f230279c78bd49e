// Package wasmind runs small language models (GGUF) and sentence embedders (Model2Vec, BERT
// GGUF) inside the wasmind WebAssembly module on wazero: pure Go, no cgo, the module embedded
// in the package (nothing to download or build).
//
//	inst, err := wasmind.New(ctx, wasmind.Config{Threads: 2})
//	f, _ := os.Open("SmolLM2-135M-Instruct.Q4_1.gguf")
//	err = inst.LoadModel(ctx, f, wasmind.LoadOptions{Context: 1024})
//	for piece, err := range inst.Chat(ctx, []wasmind.Message{{Role: wasmind.User, Content: "Hi"}}, wasmind.ChatOptions{}) {
//		...
//	}
//
// An Instance is one module with its own linear memory: Threads 1 runs the single-threaded
// module, Threads N the threaded one with N-1 helper instances on goroutines sharing its memory
// (wazero's experimental threads: memory.atomic.wait32/notify). Results are bit-identical for
// any thread count. Failures of the module are *Error values carrying its status (errors.Is(err,
// wasmind.BadFormat)); a context's cancellation stops a reply within a token.
//
// An Instance's methods may be called from several goroutines; calls into the module run one at
// a time.
package wasmind

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero"
)

// Config chooses the module and its resources.
type Config struct {
	// Threads: 0 or 1 runs the single-threaded module (wasmind.wasm); N > 1 the threaded one
	// (wasmind-mt.wasm) with N-1 helper goroutines; at most 256.
	Threads int
	// MaxMemory: bytes the module's linear memory may grow to (default and most: 4 GiB). It is
	// reserved as address space when the Instance starts and committed page by page as used.
	MaxMemory uint64
	// Cache holds wazero's compiled modules; nil uses one in-memory cache for the process
	// (wazero.NewCompilationCacheWithDir keeps them across processes).
	Cache wazero.CompilationCache

	threaded bool // the threaded module even for Threads 1 (the benchmarks' --threads 1)
}

// LoadOptions are the settings of LoadModel.
type LoadOptions struct {
	// Context is the KV cache's length in tokens; 0 takes the model's, at most 4096.
	Context int
	// Quantize turns F32, F16 and BF16 matrices into Q8_0 as they load (as llama-quantize
	// --pure writes them): 3.8x fewer bytes per token for float files.
	Quantize bool
	// Size is the model's length in bytes, needed when the reader cannot tell it (a reader
	// with Len, Stat or Seek can).
	Size int64
}

// Instance is one wasmind module: New starts it, Close ends it.
type Instance struct {
	mu       sync.Mutex
	m        *module
	closed   bool
	closing  atomic.Bool
	defaults Sampler
	cleanup  runtime.Cleanup
	chat     chatState

	// The stop flag may be written from a context's AfterFunc goroutine: only for the reply
	// that registered it (stopOwner), and never once the memory is gone (dead).
	stopMu    sync.Mutex
	stopOwner uint64
	dead      bool
}

// New starts a module: compiles it (once per process with the default cache), instantiates
// it and, with Threads > 1, its helpers.
func New(ctx context.Context, cfg Config) (*Instance, error) {
	m, err := newModule(ctx, cfg)
	if err != nil {
		return nil, err
	}
	inst := &Instance{m: m}
	text, err := m.resultText(ctx, "sampler_defaults")
	if err == nil {
		err = json.Unmarshal([]byte(text), &inst.defaults)
	}
	if err != nil {
		m.close(ctx)
		return nil, fmt.Errorf("wasmind: sampler_defaults: %w", err)
	}
	// An Instance dropped without Close still releases its helpers and memory.
	inst.cleanup = runtime.AddCleanup(inst, func(m *module) { m.close(context.Background()) }, m)
	return inst, nil
}

// Close releases the helpers and the module's memory. A reply in progress on another goroutine
// stops, and every later call returns ErrClosed. Closing twice is harmless.
func (i *Instance) Close(ctx context.Context) error {
	i.closing.Store(true)
	i.requestStop(0)
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return nil
	}
	i.closed = true
	i.stopMu.Lock()
	i.dead = true
	i.stopMu.Unlock()
	i.cleanup.Stop()
	i.m.close(ctx)
	return nil
}

// requestStop writes the stop flag if the reply `owner` is still the one running (0: any).
func (i *Instance) requestStop(owner uint64) {
	i.stopMu.Lock()
	defer i.stopMu.Unlock()
	if !i.dead && (owner == 0 || owner == i.stopOwner) {
		i.m.stop()
	}
}

// lock takes the Instance for a call into the module; ErrClosed after Close.
func (i *Instance) lock() error {
	i.mu.Lock()
	if i.closed {
		i.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// LoadModel streams a GGUF model from r into the module's memory (straight into the block the
// module's alloc gives, a few MiB at a time: never a copy of the whole file in Go) and loads
// it, replacing any model loaded before. The context is checked between chunks.
func (i *Instance) LoadModel(ctx context.Context, r io.Reader, opts LoadOptions) error {
	if opts.Context < 0 || opts.Size < 0 {
		return errorf(InvalidArgument, "LoadOptions: Context %d, Size %d: not negative", opts.Context, opts.Size)
	}
	if err := i.lock(); err != nil {
		return err
	}
	defer i.mu.Unlock()
	quantize := uint64(0)
	if opts.Quantize {
		quantize = 8 // GGML_TYPE_Q8_0
	}
	if _, err := i.m.checked(ctx, "set_context", uint64(opts.Context)); err != nil {
		return err
	}
	if _, err := i.m.checked(ctx, "set_quantize", quantize); err != nil {
		return err
	}
	ptr, size, err := i.m.stream(ctx, r, opts.Size)
	if err != nil {
		return err
	}
	i.chat = chatState{reply: i.chat.reply} // the module forgets the conversation with the model
	// The module owns the block from here, whether the load succeeds or not.
	_, err = i.m.checked(ctx, "load_model", uint64(ptr), size)
	return err
}

// LoadModelFile is LoadModel of the file at path.
func (i *Instance) LoadModelFile(ctx context.Context, path string, opts LoadOptions) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return i.LoadModel(ctx, f, opts)
}

// LoadEmbedder loads a sentence embedder: a Model2Vec folder (model.safetensors, tokenizer.json,
// config.json) or a BERT sentence encoder's GGUF file (all-MiniLM, bge, e5, gte), replacing any
// embedder loaded before. The weights stream into the module's memory as in LoadModel.
func (i *Instance) LoadEmbedder(ctx context.Context, path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		return i.LoadEmbedderFrom(ctx, f, nil, nil)
	}
	tokenizer, err := os.ReadFile(filepath.Join(path, "tokenizer.json"))
	if err != nil {
		return err
	}
	config, err := os.ReadFile(filepath.Join(path, "config.json"))
	if err != nil {
		return err
	}
	f, err := os.Open(filepath.Join(path, "model.safetensors"))
	if err != nil {
		return err
	}
	defer f.Close()
	return i.LoadEmbedderFrom(ctx, f, tokenizer, config)
}

// LoadEmbedderFrom loads an embedder from its parts: a Model2Vec model.safetensors with its
// tokenizer.json and config.json, or a BERT GGUF file with both JSONs nil. weights must tell
// its length (Len, Stat or Seek, as *os.File and *bytes.Reader do).
func (i *Instance) LoadEmbedderFrom(ctx context.Context, weights io.Reader, tokenizerJSON, configJSON []byte) error {
	if (tokenizerJSON == nil) != (configJSON == nil) {
		return errorf(InvalidArgument, "a Model2Vec embedder needs both tokenizer.json and config.json")
	}
	if err := i.lock(); err != nil {
		return err
	}
	defer i.mu.Unlock()
	m := i.m
	var tok, cfg uint32
	defer func() {
		m.free(ctx, tok, uint64(len(tokenizerJSON)))
		m.free(ctx, cfg, uint64(len(configJSON)))
	}()
	var err error
	if tokenizerJSON != nil {
		if tok, err = m.put(ctx, string(tokenizerJSON)); err != nil {
			return err
		}
		if cfg, err = m.put(ctx, string(configJSON)); err != nil {
			return err
		}
	}
	ptr, size, err := m.stream(ctx, weights, 0)
	if err != nil {
		return err
	}
	// The module owns the weights' block from here; it copies the JSONs.
	_, err = m.checked(ctx, "load_embedder", uint64(ptr), size, uint64(tok),
		uint64(len(tokenizerJSON)), uint64(cfg), uint64(len(configJSON)))
	return err
}

// stream allocates a block of the reader's size and reads the reader into it, 4 MiB at a
// time, straight into linear memory. The caller hands the block to the module.
func (m *module) stream(ctx context.Context, r io.Reader, given int64) (uint32, uint64, error) {
	size, err := readerSize(r, given)
	if err != nil {
		return 0, 0, err
	}
	ptr, err := m.alloc(ctx, uint64(size))
	if err != nil {
		return 0, 0, err
	}
	const chunk = 4 << 20
	for at := uint64(0); at < uint64(size); {
		if err := ctx.Err(); err != nil {
			m.free(ctx, ptr, uint64(size))
			return 0, 0, err
		}
		buf, err := m.view(ptr+uint32(at), min(chunk, uint64(size)-at))
		if err == nil {
			var n int
			n, err = io.ReadFull(r, buf)
			at += uint64(n)
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				err = fmt.Errorf("wasmind: the reader ended after %d of %d bytes: %w", at, size,
					io.ErrUnexpectedEOF)
			}
		}
		if err != nil {
			m.free(ctx, ptr, uint64(size))
			return 0, 0, err
		}
	}
	if given > 0 {
		// A reader longer than the Size it was given is a mistake, not a shorter model.
		var one [1]byte
		if n, _ := io.ReadAtLeast(r, one[:], 1); n > 0 {
			m.free(ctx, ptr, uint64(size))
			return 0, 0, errorf(InvalidArgument, "the reader holds more than LoadOptions.Size (%d bytes)", size)
		}
	}
	return ptr, uint64(size), nil
}

// readerSize is the bytes left in r: given if > 0, else from Len, Stat or Seek.
func readerSize(r io.Reader, given int64) (int64, error) {
	if given > 0 {
		return given, nil
	}
	if l, ok := r.(interface{ Len() int }); ok {
		return int64(l.Len()), nil
	}
	var end int64 = -1
	if s, ok := r.(interface{ Stat() (fs.FileInfo, error) }); ok {
		if fi, err := s.Stat(); err == nil && fi.Mode().IsRegular() {
			end = fi.Size()
		}
	}
	if s, ok := r.(io.Seeker); ok {
		cur, err := s.Seek(0, io.SeekCurrent)
		if err == nil && end < 0 {
			end, err = s.Seek(0, io.SeekEnd)
			if err == nil {
				_, err = s.Seek(cur, io.SeekStart)
			}
		}
		if err == nil && end >= cur {
			return end - cur, nil
		}
	} else if end >= 0 {
		return end, nil
	}
	return 0, errorf(InvalidArgument, "the reader's length is unknown: set LoadOptions.Size")
}

// Info describes the module and what it holds.
type Info struct {
	Threads   int    // threads the module's jobs use, the caller's included
	Threaded  bool   // the threaded module (Config.Threads > 1)
	MaxMemory uint64 // bytes the memory may grow to
	Memory    uint64 // bytes the memory holds now
	Model     *ModelInfo
	Embedder  *EmbedderInfo
}

// ModelInfo is part of the module's model_info; JSON has all of it (abi/ABI.md).
type ModelInfo struct {
	Name         string          `json:"name"`
	Arch         string          `json:"arch"`
	Layers       int             `json:"layers"`
	Dim          int             `json:"dim"`
	Vocab        int             `json:"n_vocab"`
	Context      int             `json:"context"`
	ChatTemplate string          `json:"chat_template"`
	JSON         json.RawMessage `json:"-"`
}

// EmbedderInfo is the module's embedder_info: kind ("model2vec" or "bert") and dimension.
type EmbedderInfo struct {
	Kind string          `json:"kind"`
	Dim  int             `json:"dim"`
	JSON json.RawMessage `json:"-"`
}

// Info reports the module's threads and memory, and the loaded model and embedder (nil when
// none is loaded).
func (i *Instance) Info(ctx context.Context) (Info, error) {
	if err := i.lock(); err != nil {
		return Info{}, err
	}
	defer i.mu.Unlock()
	m := i.m
	threads, err := m.call(ctx, "pool_threads")
	if err != nil {
		return Info{}, err
	}
	info := Info{Threads: int(threads), Threaded: m.threaded, MaxMemory: m.limit,
		Memory: uint64(m.mem.Size())}
	var model ModelInfo
	if raw, ok, err := m.infoJSON(ctx, "model_info", &model); err != nil {
		return Info{}, err
	} else if ok {
		model.JSON, info.Model = raw, &model
	}
	var embedder EmbedderInfo
	if raw, ok, err := m.infoJSON(ctx, "embedder_info", &embedder); err != nil {
		return Info{}, err
	} else if ok {
		embedder.JSON, info.Embedder = raw, &embedder
	}
	return info, nil
}

// infoJSON decodes into v the JSON an info export (model_info, embedder_info) leaves in the
// result buffer; false, without an error, when nothing is loaded (NO_MODEL).
func (m *module) infoJSON(ctx context.Context, name string, v any) (json.RawMessage, bool, error) {
	text, err := m.resultText(ctx, name)
	if errors.Is(err, NoModel) {
		return nil, false, nil
	} else if err != nil {
		return nil, false, err
	}
	raw := json.RawMessage(text)
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, false, fmt.Errorf("wasmind: %s: %w", name, err)
	}
	return raw, true, nil
}
