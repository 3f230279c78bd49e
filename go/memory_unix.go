//go:build unix

package wasmind

import "syscall"

// reserve maps n bytes of address space, zero and committed lazily by the OS page by page
// (MAP_NORESERVE): a linear memory's whole maximum, so it never moves when it grows (a shared
// memory must not; a fixed address also lets Instance.stop write the stop flag from any
// goroutine). release gives it back to the OS.
func reserve(n uint64) ([]byte, func()) {
	if n == 0 || n != uint64(int(n)) {
		return nil, func() {}
	}
	b, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANON|mapNoReserve)
	if err != nil {
		return nil, func() {}
	}
	return b, func() { _ = syscall.Munmap(b) }
}
