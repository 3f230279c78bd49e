//go:build linux

package wasmind

import "syscall"

const mapNoReserve = syscall.MAP_NORESERVE
