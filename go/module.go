package wasmind

import (
	"context"
	_ "embed"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

// The modules of `cargo xtask dist` (SIMD128; wazero has no relaxed SIMD, so the -relaxed
// builds are not shipped here). modules_test.go checks they equal dist/'s; `cargo xtask
// go-modules` refreshes them.
var (
	//go:embed modules/wasmind.wasm
	singleThreadedWasm []byte
	//go:embed modules/wasmind-mt.wasm
	threadedWasm []byte
)

const (
	pageSize    = 65536
	maxPages    = 65536 // wasm32: 4 GiB
	maxMemory   = uint64(maxPages) * pageSize
	helperStack = 1 << 20 // >= WASMIND_HELPER_STACK_MIN (256 KiB)
	maxHelpers  = 255     // WASMIND_MAX_HELPERS
	abiVersion  = 1       // WASMIND_ABI_VERSION
	stopOffset  = 64      // WASMIND_SHARED_STOP: the stop flag, from shared_state()
)

// The process's compiled modules, when Config.Cache is nil: compiling one takes about a
// second, so every Instance after the first reuses the machine code.
var defaultCache = wazero.NewCompilationCache()

// module is one wasmind module in its own wazero runtime: the driver instance and, threaded,
// the helper instances on the shared memory, each calling helper_loop on its own goroutine.
// Only the driver's methods are here; the caller serializes them (Instance.mu).
type module struct {
	rt       wazero.Runtime
	driver   api.Module
	mem      api.Memory
	fns      map[string]api.Function
	stack    [8]uint64 // CallWithStack's parameters and results (sampler_set has 7)
	threaded bool
	threads  int
	limit    uint64 // bytes the memory may grow to
	helpers  []chan error
	memory   *linearMemory
	stopWord *uint32 // the stop flag in linear memory (its address never changes)
	trapped  string
}

// linearMemory backs the module's one linear memory with address space reserved up front, so
// it never moves as it grows (wazero's experimental.MemoryAllocator).
type linearMemory struct {
	buf     []byte
	release func()
	once    sync.Once
	keep    atomic.Bool // a helper never returned: its goroutine may still touch the memory
}

func (m *linearMemory) Reallocate(size uint64) []byte {
	if size > uint64(len(m.buf)) {
		return nil // memory.grow fails: alloc returns 0, the call OUT_OF_MEMORY
	}
	return m.buf[:size]
}

func (m *linearMemory) Free() {
	if !m.keep.Load() {
		m.once.Do(m.release)
	}
}

// sharedMemoryModule is a module that only defines and exports a shared memory of `min` to
// `max` pages: the `env.memory` the threaded module imports.
func sharedMemoryModule(min, max uint32) []byte {
	leb := func(b []byte, v uint32) []byte {
		for {
			c := byte(v & 0x7f)
			v >>= 7
			if v == 0 {
				return append(b, c)
			}
			b = append(b, c|0x80)
		}
	}
	limits := leb(leb([]byte{1, 0x03}, min), max) // one memory; flags: shared, has a maximum
	out := []byte{0, 'a', 's', 'm', 1, 0, 0, 0, 5, byte(len(limits))}
	out = append(out, limits...)
	export := append([]byte{1, 6}, "memory"...)
	export = append(export, 0x02, 0) // memory 0
	out = append(out, 7, byte(len(export)))
	return append(out, export...)
}

func newModule(ctx context.Context, cfg Config) (*module, error) {
	threads := cfg.Threads
	if threads < 1 {
		threads = 1
	}
	if threads > maxHelpers+1 {
		return nil, errorf(InvalidArgument, "Threads %d: at most %d (%d helpers and the driver)",
			threads, maxHelpers+1, maxHelpers)
	}
	limit := cfg.MaxMemory
	if limit == 0 || limit > maxMemory {
		limit = maxMemory
	}
	limit = (limit + pageSize - 1) / pageSize * pageSize
	cache := cfg.Cache
	if cache == nil {
		cache = defaultCache
	}
	rc := wazero.NewRuntimeConfig().
		WithCoreFeatures(api.CoreFeaturesV2 | experimental.CoreFeaturesThreads).
		WithCompilationCache(cache)
	m := &module{
		rt:       wazero.NewRuntimeWithConfig(ctx, rc),
		fns:      map[string]api.Function{},
		threaded: threads > 1 || cfg.threaded,
		threads:  threads,
		limit:    limit,
	}
	if err := m.start(ctx); err != nil {
		m.close(ctx)
		return nil, err
	}
	return m, nil
}

func (m *module) start(ctx context.Context) error {
	bin := singleThreadedWasm
	if m.threaded {
		bin = threadedWasm
	}
	compiled, err := m.rt.CompileModule(ctx, bin)
	if err != nil {
		return errorf(Unsupported, "wazero cannot compile the module: %v", err)
	}
	buf, release := reserve(m.limit)
	if buf == nil {
		return errorf(OutOfMemory, "cannot reserve %d bytes of address space for the module's "+
			"memory; set Config.MaxMemory lower", m.limit)
	}
	m.memory = &linearMemory{buf: buf, release: release}
	actx := experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(
		func(_, max uint64) experimental.LinearMemory {
			m.memory.buf = m.memory.buf[:min(max, uint64(len(m.memory.buf)))]
			return m.memory
		}))
	if m.threaded {
		imports := compiled.ImportedMemories()
		if len(imports) != 1 {
			return errorf(Unsupported, "the threaded module imports %d memories, not 1", len(imports))
		}
		env, err := m.rt.CompileModule(ctx, sharedMemoryModule(imports[0].Min(), maxPages))
		if err == nil {
			_, err = m.rt.InstantiateModule(actx, env, wazero.NewModuleConfig().WithName("env"))
		}
		if err != nil {
			return errorf(Unsupported, "wazero: the shared memory: %v", err)
		}
	}
	m.driver, err = m.rt.InstantiateModule(actx, compiled, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		return errorf(Unsupported, "wazero cannot instantiate the module: %v", err)
	}
	m.mem = m.driver.Memory()
	if v, err := m.call(ctx, "abi_version"); err != nil || v != abiVersion {
		return errorf(Unsupported, "the module's ABI version is %d, this package speaks %d (%v)",
			v, abiVersion, err)
	}
	state, err := m.call(ctx, "shared_state")
	if err != nil {
		return err
	}
	word, ok := m.mem.Read(uint32(state)+stopOffset, 4)
	if !ok {
		return errorf(Trap, "shared_state() is outside the memory")
	}
	m.stopWord = (*uint32)(unsafe.Pointer(&word[0]))
	if m.threaded {
		return m.startHelpers(ctx, compiled, m.threads-1)
	}
	return nil
}

// startHelpers follows ABI.md "Starting helpers": per helper a stack from the driver's alloc,
// an instance on the shared memory with its __stack_pointer at the stack's top, helper_loop(id)
// on a goroutine; then the wait until all are listening, and pool_set_threads.
func (m *module) startHelpers(ctx context.Context, compiled wazero.CompiledModule, n int) error {
	for id := range n {
		stack, err := m.alloc(ctx, helperStack)
		if err != nil {
			return err
		}
		inst, err := m.rt.InstantiateModule(ctx, compiled, wazero.NewModuleConfig().WithName(""))
		if err != nil {
			return errorf(Unsupported, "wazero cannot instantiate helper %d: %v", id, err)
		}
		sp, ok := inst.ExportedGlobal("__stack_pointer").(api.MutableGlobal)
		loop := inst.ExportedFunction("helper_loop")
		if !ok || loop == nil {
			return errorf(Unsupported, "the threaded module exports no mutable __stack_pointer or no helper_loop")
		}
		sp.Set(uint64((stack + helperStack) &^ 15))
		done := make(chan error, 1)
		m.helpers = append(m.helpers, done)
		go func() {
			_, err := loop.Call(context.Background(), uint64(id))
			done <- err
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready, err := m.call(ctx, "pool_helpers_ready")
		if err != nil {
			return err
		}
		if int(int32(ready)) >= n {
			break
		}
		for id, done := range m.helpers {
			select {
			case err := <-done:
				done <- err
				return errorf(Trap, "helper %d ended before it was ready: %v", id, err)
			default:
			}
		}
		if time.Now().After(deadline) {
			return errorf(HelperLost, "only %d of %d helpers started in 30 s", int32(ready), n)
		}
		time.Sleep(time.Millisecond)
	}
	_, err := m.checked(ctx, "pool_set_threads", uint64(n+1))
	return err
}

// close releases the helpers (pool_shutdown), waits up to 5 s for their goroutines, and closes
// the runtime. A helper that never returns keeps the memory mapped (its goroutine may wake).
func (m *module) close(ctx context.Context) {
	if len(m.helpers) > 0 && m.driver != nil {
		if f := m.driver.ExportedFunction("pool_shutdown"); f != nil {
			_, _ = f.Call(context.Background())
		}
		timeout := time.After(5 * time.Second)
	wait:
		for _, done := range m.helpers {
			select {
			case <-done:
			case <-timeout:
				m.memory.keep.Store(true)
				break wait
			}
		}
	}
	_ = m.rt.Close(ctx)
	if m.memory != nil {
		m.memory.Free()
	}
}

// stop asks the running generation to stop: a 32-bit store of 1 to the stop flag, which the
// module checks before every token and between prompt chunks (any goroutine may call it).
func (m *module) stop() { atomic.StoreUint32(m.stopWord, 1) }

// --- calls -------------------------------------------------------------------------------

func (m *module) fn(name string) api.Function {
	f, ok := m.fns[name]
	if !ok {
		f = m.driver.ExportedFunction(name)
		m.fns[name] = f
	}
	return f
}

// call runs an export with i32/f32/f64 arguments encoded as wazero's uint64s; its result (0
// for none). A trap is an *Error with status Trap, after which the module refuses every call.
func (m *module) call(ctx context.Context, name string, args ...uint64) (uint64, error) {
	if m.trapped != "" {
		return 0, errorf(Trap, "the module trapped earlier (%s); start a new Instance", m.trapped)
	}
	f := m.fn(name)
	if f == nil {
		return 0, errorf(Unsupported, "the module has no export %q", name)
	}
	copy(m.stack[:], args)
	if err := f.CallWithStack(ctx, m.stack[:]); err != nil {
		msg, _, _ := strings.Cut(err.Error(), "\n")
		m.trapped = name + ": " + msg
		return 0, errorf(Trap, "%s trapped: %v", name, err)
	}
	switch results := f.Definition().ResultTypes(); {
	case len(results) == 0:
		return 0, nil
	case results[0] == api.ValueTypeI32 || results[0] == api.ValueTypeF32:
		return uint64(uint32(m.stack[0])), nil // wazero leaves the upper half undefined
	}
	return m.stack[0], nil
}

// checked calls an export that returns an i32 status: its value if >= 0, else an *Error with
// the module's last_error message.
func (m *module) checked(ctx context.Context, name string, args ...uint64) (int32, error) {
	v, err := m.call(ctx, name, args...)
	if err != nil {
		return 0, err
	}
	rc := int32(uint32(v))
	if rc < 0 {
		return rc, m.failure(ctx, rc)
	}
	return rc, nil
}

// failure is the *Error of a negative status rc.
func (m *module) failure(ctx context.Context, rc int32) error {
	return &Error{Status: Status(-rc), Message: m.lastError(ctx)}
}

func (m *module) lastError(ctx context.Context) string {
	ptr, err1 := m.call(ctx, "last_error")
	n, err2 := m.call(ctx, "last_error_len")
	if err1 != nil || err2 != nil {
		return "(last_error unreadable)"
	}
	b, ok := m.mem.Read(uint32(ptr), uint32(n))
	if !ok {
		return "(last_error outside the memory)"
	}
	return string(b)
}

// --- memory ------------------------------------------------------------------------------

// alloc is the module's alloc(n): a 16-aligned block, or OUT_OF_MEMORY.
func (m *module) alloc(ctx context.Context, n uint64) (uint32, error) {
	if n >= 1<<32 {
		return 0, errorf(OutOfMemory, "%d bytes do not fit in a wasm32 memory (4 GiB at most)", n)
	}
	ptr, err := m.call(ctx, "alloc", max(1, n))
	if err != nil {
		return 0, err
	}
	if uint32(ptr) == 0 {
		return 0, errorf(OutOfMemory, "alloc(%d) failed: the memory holds %d bytes and may grow "+
			"to %d (Config.MaxMemory)", n, m.mem.Size(), m.limit)
	}
	return uint32(ptr), nil
}

func (m *module) free(ctx context.Context, ptr uint32, n uint64) {
	if ptr != 0 {
		_, _ = m.call(ctx, "free", uint64(ptr), max(1, n))
	}
}

// view is n bytes of linear memory at ptr, valid until the next call that can grow it.
func (m *module) view(ptr uint32, n uint64) ([]byte, error) {
	b, ok := m.mem.Read(ptr, uint32(n))
	if !ok || n >= 1<<32 {
		return nil, errorf(InvalidArgument, "%d bytes at %d are outside the memory (%d bytes)",
			n, ptr, m.mem.Size())
	}
	return b, nil
}

// read is a copy of n bytes at ptr.
func (m *module) read(ptr uint32, n uint64) ([]byte, error) {
	b, err := m.view(ptr, n)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), b...), nil
}

// put copies text into a new block; free it with free(ptr, len(text)).
func (m *module) put(ctx context.Context, text string) (uint32, error) {
	ptr, err := m.alloc(ctx, uint64(len(text)))
	if err == nil && !m.mem.WriteString(ptr, text) {
		m.free(ctx, ptr, uint64(len(text)))
		return 0, errorf(InvalidArgument, "block %d of %d bytes is outside the memory", ptr, len(text))
	}
	return ptr, err
}

// resultText is the result buffer's text after a text-returning call that returned rc.
func (m *module) resultText(ctx context.Context, name string, args ...uint64) (string, error) {
	n, err := m.checked(ctx, name, args...)
	if err != nil {
		return "", err
	}
	ptr, err := m.call(ctx, "result_ptr")
	if err != nil {
		return "", err
	}
	b, err := m.view(uint32(ptr), uint64(n))
	return string(b), err
}

// i32 is an i32 argument (or a u32) as wazero's uint64.
func i32(v int32) uint64 { return uint64(uint32(v)) }

func f32(v float32) uint64 { return api.EncodeF32(v) }

func f64(v float64) uint64 { return api.EncodeF64(v) }
