"""The module on wasmtime: one engine, the compiled modules, and `Runtime` (one driver instance
plus its helper threads) with the memory access and status checks the public classes use.

Memory is read and written through ctypes at the address wasmtime reports, fetched afresh for
every access: any call that can allocate may grow (and, single-threaded, move) the memory.
"""

import ctypes
import math
import os
import threading
import time
import weakref
from pathlib import Path

import wasmtime
from wasmtime import _ffi as ffi

PAGE = 65536
MAX_PAGES = 65536
MiB = 1 << 20
HELPER_STACK = MiB  # >= WASMIND_HELPER_STACK_MIN (256 KiB)
MAX_HELPERS = 255

# Status names by code (abi/wasmind.h, WASMIND_E_*).
STATUS = ('OK', 'INVALID_ARGUMENT', 'OUT_OF_MEMORY', 'BAD_FORMAT', 'UNSUPPORTED', 'NO_MODEL',
          'CONTEXT_FULL', 'INVALID_UTF8', 'BUFFER_TOO_SMALL', 'WRONG_THREAD', 'STOPPED', 'END',
          'HELPER_LOST')
E_INVALID_ARGUMENT, E_OUT_OF_MEMORY, E_BAD_FORMAT, E_NO_MODEL = 1, 2, 3, 5
E_CONTEXT_FULL, E_STOPPED, E_END = 6, 10, 11
STOP_FLAG_OFFSET = 64


class WasmindError(Exception):
    """A failed call. `code` is the positive WASMIND_E_* status (0 for a trap or a host-side
    failure of the module), `status` its name ('BAD_FORMAT', ..., or 'TRAP'), and the message
    is the module's `last_error` text."""

    def __init__(self, code, message, status=None):
        self.code = code
        self.status = status or (STATUS[code] if 0 <= code < len(STATUS) else 'UNKNOWN')
        self.message = message
        super().__init__(f'{self.status}: {message}')


def _u32(v):
    """An i32 result read as the u32 the ABI means (pointers, sizes)."""
    return v & 0xFFFFFFFF


def _i32(v):
    """A u32 argument as the i32 wasmtime-py takes."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


# ---------------------------------------------------------------------------------------------
# Module files

def modules_dir():
    """Where the .wasm files are: $WASMIND_DIST, else the package's `modules/` folder (filled by
    `python/copy_modules.py` from the repository's dist/ before a wheel is built)."""
    env = os.environ.get('WASMIND_DIST')
    return Path(env) if env else Path(__file__).resolve().parent / 'modules'


def module_file(threaded, relaxed):
    name = f"wasmind{'-relaxed' if relaxed else ''}{'-mt' if threaded else ''}.wasm"
    path = modules_dir() / name
    if not path.is_file():
        raise FileNotFoundError(
            f'wasmind: the module {path} is missing. Build dist/ with `cargo xtask dist`, then '
            '`python python/copy_modules.py` copies the modules into the package (or set '
            'WASMIND_DIST to the folder that holds them)')
    return path


# ---------------------------------------------------------------------------------------------
# Engine, compiled modules, relaxed-SIMD probe

_lock = threading.Lock()
_engine = None
_compiled = {}
_relaxed_ok = None

# `(func (export "f") (v128.store (i32.const 32) (i32x4.relaxed_dot_i8x16_i7x16_add_s
#   (v128.load 0) (v128.load 16) (v128.load 48))))` with an exported memory "m" (glue/wasmind.js).
_RELAXED_PROBE = bytes([
    0, 97, 115, 109, 1, 0, 0, 0, 1, 4, 1, 96, 0, 0, 3, 2, 1, 0, 5, 3, 1, 0, 1, 7, 9, 2, 1, 109, 2,
    0, 1, 102, 0, 0, 10, 31, 1, 29, 0, 65, 32, 65, 0, 253, 0, 4, 0, 65, 16, 253, 0, 4, 0, 65, 48,
    253, 0, 4, 0, 253, 147, 2, 253, 11, 4, 0, 11])


def engine():
    """The process's engine: threads, shared memory, SIMD and relaxed SIMD on; compiled modules
    kept in wasmtime's cache (~/.cache/wasmtime) unless WASMIND_NO_CACHE=1."""
    global _engine
    with _lock:
        if _engine is None:
            cfg = wasmtime.Config()
            cfg.wasm_threads = True
            cfg.shared_memory = True
            cfg.wasm_simd = True
            cfg.wasm_relaxed_simd = True
            if os.environ.get('WASMIND_NO_CACHE') != '1':
                try:
                    cfg.cache = True
                except wasmtime.WasmtimeError:
                    pass  # no cache directory: compile each time
            _engine = wasmtime.Engine(cfg)
        return _engine


def has_relaxed_simd():
    """Whether this engine runs relaxed SIMD and computes the probe's dot product right (as
    glue/wasmind.js checks); without it the SIMD128 modules run."""
    global _relaxed_ok
    if _relaxed_ok is None:
        ok = False
        try:
            store = wasmtime.Store(engine())
            inst = wasmtime.Instance(store, wasmtime.Module(engine(), _RELAXED_PROBE), [])
            mem = inst.exports(store)['m']
            a = bytes((256 - 3) if i % 2 else 2 for i in range(16))
            b = bytes(5 if i < 8 else 100 for i in range(16))
            mem.write(store, a + b, 0)
            mem.write(store, (1000).to_bytes(4, 'little') + bytes(12), 48)
            inst.exports(store)['f'](store)
            got = [int.from_bytes(mem.read(store, 32 + 4 * k, 36 + 4 * k), 'little', signed=True)
                   for k in range(4)]
            ok = got == [990, -10, -200, -200]
        except (wasmtime.WasmtimeError, wasmtime.Trap):
            ok = False
        _relaxed_ok = ok
    return _relaxed_ok


def compiled(threaded, relaxed):
    key = (threaded, relaxed)
    with _lock:
        m = _compiled.get(key)
    if m is None:
        path = module_file(threaded, relaxed)
        m = wasmtime.Module.from_file(engine(), str(path))
        with _lock:
            _compiled[key] = m
    return m


class _SharedMemory(wasmtime.SharedMemory):
    """wasmtime-py's SharedMemory, passable as an import. As shipped (wasmtime 51.0.0),
    `SharedMemory._as_extern` wraps its pointer once too often, so any Instance or Linker given
    one fails with `TypeError: incompatible types, LP_LP_wasmtime_sharedmemory instance instead
    of LP_wasmtime_sharedmemory instance` (wasmtime-py #318). The extern holds the pointer
    itself; wasmtime's C API clones the memory it names when instantiating."""

    def _as_extern(self):
        union = ffi.wasmtime_extern_union(sharedmemory=self.ptr())
        return ffi.wasmtime_extern_t(ffi.WASMTIME_EXTERN_SHAREDMEMORY, union)


def _import_minimum(module):
    for imp in module.imports:
        ty = imp.type
        if isinstance(ty, wasmtime.MemoryType):
            return ty.limits.min
    raise WasmindError(0, 'the threaded module imports no memory', 'HOST')


# ---------------------------------------------------------------------------------------------
# Runtime

def _helper_main(module, memory, ident, stack_top, out):
    """One helper thread: its own store and instance on the shared memory, its own stack, in
    helper_loop until pool_shutdown. wasmtime-py calls through ctypes, which releases the GIL,
    so helpers run in parallel with the driver."""
    try:
        store = wasmtime.Store(engine())
        inst = wasmtime.Instance(store, module, [memory])
        ex = inst.exports(store)
        ex['__stack_pointer'].set_value(store, wasmtime.Val.i32(_i32(stack_top)))
        out['running'] = True
        out['rc'] = ex['helper_loop'](store, ident)
    except Exception as e:  # reported by Runtime.close / the ready wait
        out['error'] = e


def _shutdown(driver_store, shutdown_fn, helpers):
    try:
        shutdown_fn(driver_store)
    except Exception:
        return
    deadline = time.monotonic() + 5
    for t, _ in helpers:
        t.join(max(0.0, deadline - time.monotonic()))


class Runtime:
    """One wasmind module: the driver instance (this object, used from one thread at a time)
    and, with `threads > 1`, `threads - 1` helper threads on a shared memory.

    `threads`: 1 runs the single-threaded module; more runs wasmind-mt.wasm with helpers.
    `max_memory`: bytes the shared memory may grow to (threaded only; wasmtime reserves it).
    `relaxed`: the relaxed-SIMD build; None: where the probe says the engine runs it."""

    def __init__(self, threads=1, max_memory=None, relaxed=None):
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise ValueError(f'threads must be an integer >= 1, not {threads!r}')
        threads = min(threads, MAX_HELPERS + 1)
        self.relaxed = has_relaxed_simd() if relaxed is None else bool(relaxed)
        self.threaded = threads > 1
        self.threads = threads
        self._trapped = None
        self._helpers = []
        self._store = wasmtime.Store(engine())
        module = compiled(self.threaded, self.relaxed)
        self._module = module
        if not self.threaded:
            self._instance = wasmtime.Instance(self._store, module, [])
            self._memory = self._instance.exports(self._store)['memory']
            self._shared = None
        else:
            minimum = _import_minimum(module)
            maximum = MAX_PAGES if max_memory is None else \
                min(MAX_PAGES, max(minimum, math.ceil(max_memory / PAGE)))
            self._shared = _SharedMemory(engine(), wasmtime.MemoryType(
                wasmtime.Limits(minimum, maximum), shared=True))
            self._instance = wasmtime.Instance(self._store, module, [self._shared])
            self._memory = None
        exports = self._instance.exports(self._store)
        self._fn = {}
        for name in ('alloc', 'free', 'last_error', 'last_error_len', 'result_ptr'):
            self._fn[name] = exports[name]
        self._exports = exports
        if self.threaded:
            self._start_helpers(threads - 1)
            self.call('pool_set_threads', threads)
        self._finalizer = weakref.finalize(
            self, _shutdown, self._store, exports['pool_shutdown'], self._helpers) \
            if self.threaded else None

    def _start_helpers(self, n):
        for ident in range(n):
            stack = self.alloc(HELPER_STACK)
            out = {}
            t = threading.Thread(target=_helper_main, name=f'wasmind-helper-{ident}', daemon=True,
                                 args=(self._module, self._shared, ident,
                                       (stack + HELPER_STACK) & ~15, out))
            t.start()
            self._helpers.append((t, out))
        start = time.monotonic()
        while self.call('pool_helpers_ready') < n:
            failed = [o['error'] for _, o in self._helpers if 'error' in o]
            if failed:
                self.close()
                raise WasmindError(0, f'a helper failed to start: {failed[0]}', 'HOST')
            if time.monotonic() - start > 30:
                self.close()
                raise WasmindError(0, f'only {self.call("pool_helpers_ready")} of {n} helpers '
                                   'started in 30 s', 'HOST')
            time.sleep(0.001)

    def close(self):
        """Releases the helpers (pool_shutdown) and waits up to 5 s for their threads."""
        if self._finalizer is not None:
            self._finalizer()

    # -- calls -------------------------------------------------------------------------------

    def func(self, name):
        f = self._fn.get(name)
        if f is None:
            f = self._fn[name] = self._exports[name]
        return f

    def call(self, name, *args):
        """Calls an export. A trap (a module bug or a lost helper) becomes a WasmindError with
        status 'TRAP', and the module refuses every later call: its state may be half written."""
        if self._trapped is not None:
            raise WasmindError(0, f'the module trapped earlier ({self._trapped}); load a new '
                               'one', 'TRAP')
        try:
            return self.func(name)(self._store, *args)
        except wasmtime.Trap as e:
            self._trapped = f'{name}: {e}'.splitlines()[0]
            raise WasmindError(0, f'{name} trapped: {e}', 'TRAP') from None
        except wasmtime.WasmtimeError as e:
            self._trapped = f'{name}: {e}'.splitlines()[0]
            raise WasmindError(0, f'{name} failed in wasmtime: {e}', 'TRAP') from None

    def check(self, rc):
        """`rc` if >= 0, else a WasmindError with the module's last_error text."""
        if rc < 0:
            raise WasmindError(-rc, self.last_error())
        return rc

    def call_checked(self, name, *args):
        return self.check(self.call(name, *args))

    def last_error(self):
        ptr = _u32(self.call('last_error'))
        n = _u32(self.call('last_error_len'))
        return self.read(ptr, n).decode('utf-8', 'replace')

    # -- memory --------------------------------------------------------------------------------

    def _base(self):
        if self._shared is not None:
            return (ctypes.cast(self._shared.data_ptr(), ctypes.c_void_p).value or 0,
                    self._shared.data_len())
        return (ctypes.cast(self._memory.data_ptr(self._store), ctypes.c_void_p).value or 0,
                self._memory.data_len(self._store))

    def _range(self, ptr, n):
        base, size = self._base()
        if ptr < 0 or n < 0 or ptr + n > size:
            raise WasmindError(E_INVALID_ARGUMENT,
                               f'{n} bytes at {ptr} are outside the memory ({size} bytes)')
        return base + ptr

    def read(self, ptr, n):
        """A copy of `n` bytes at `ptr`."""
        return ctypes.string_at(self._range(ptr, n), n) if n else b''

    def write(self, ptr, data):
        """Copies `data` (bytes-like) to `ptr`."""
        mv = memoryview(data).cast('B')
        n = mv.nbytes
        if n:
            dst = self._range(ptr, n)
            src = (ctypes.c_ubyte * n).from_buffer_copy(mv) if mv.readonly else \
                (ctypes.c_ubyte * n).from_buffer(mv)
            ctypes.memmove(dst, src, n)

    def view(self, ptr, n):
        """A writable memoryview of `n` bytes at `ptr`, valid until the next call that can grow
        the memory (for readinto: a file goes straight into the module's memory)."""
        return memoryview((ctypes.c_ubyte * n).from_address(self._range(ptr, n))).cast('B')

    def alloc(self, n):
        if n >= 1 << 32:
            raise WasmindError(E_OUT_OF_MEMORY, f'{n} bytes do not fit in a wasm32 memory '
                               '(4 GiB at most)')
        ptr = _u32(self.call('alloc', _i32(max(1, n))))
        if ptr == 0:
            raise WasmindError(E_OUT_OF_MEMORY, f'alloc({n}) failed: the memory holds '
                               f'{self._base()[1]} bytes and cannot grow enough')
        return ptr

    def free(self, ptr, n):
        self.call('free', _i32(ptr), _i32(max(1, n)))

    def put(self, data):
        """A new block holding `data`; free it with free(ptr, len(data))."""
        ptr = self.alloc(len(data))
        self.write(ptr, data)
        return ptr

    def result_text(self, rc):
        """The result buffer's text after a text-returning call that returned `rc`."""
        n = self.check(rc)
        return self.read(_u32(self.call('result_ptr')), n).decode('utf-8')

    def load_file_block(self, path, chunk=4 * MiB):
        """Allocates a block of the file's size and reads the file into it in `chunk` pieces,
        straight into the module's memory (no copy of the file in Python). Returns (ptr, size);
        the caller hands the block to the module or frees it."""
        with open(path, 'rb') as f:
            size = os.fstat(f.fileno()).st_size
            ptr = self.alloc(size)
            try:
                at = 0
                while at < size:
                    n = min(chunk, size - at)
                    got = f.readinto(self.view(ptr + at, n))
                    if not got:
                        raise OSError(f'{path}: the file ended at {at} of {size} bytes')
                    at += got
            except BaseException:
                self.free(ptr, size)
                raise
        return ptr, size

    def stop_flag_address(self):
        """Host address of the stop flag (a u32; threaded: shared by every instance)."""
        return self._range(_u32(self.call('shared_state')) + STOP_FLAG_OFFSET, 4)
