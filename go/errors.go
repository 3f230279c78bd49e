package wasmind

import (
	"errors"
	"fmt"
)

// Status is the module's status code (abi/wasmind.h, WASMIND_E_*), plus Trap for a call the
// module could not finish. A Status is an error too, so errors.Is(err, wasmind.BadFormat)
// tells what kind of failure an *Error is.
type Status int32

// The module's statuses (never renumbered), and Trap.
const (
	InvalidArgument Status = 1  // out-of-range argument, bad pointer or length
	OutOfMemory     Status = 2  // an allocation failed; nothing changed
	BadFormat       Status = 3  // malformed input bytes (truncated, inconsistent)
	Unsupported     Status = 4  // well formed but not implemented (tensor type, architecture)
	NoModel         Status = 5  // needs a loaded model or embedder
	ContextFull     Status = 6  // the KV cache is full
	InvalidUTF8     Status = 7  // text is not valid UTF-8
	BufferTooSmall  Status = 8  // output buffer too small
	WrongThread     Status = 9  // not allowed from this build or thread
	Stopped         Status = 10 // generation stopped through the stop flag
	End             Status = 11 // the reply is complete (not a failure)
	HelperLost      Status = 12 // a helper thread stopped mid-job; start a new Instance
	// Trap: the module trapped (a bug, or wazero refused the call). The Instance refuses
	// every later call, as its state may be half written.
	Trap Status = -1
)

var statusNames = [...]string{"OK", "INVALID_ARGUMENT", "OUT_OF_MEMORY", "BAD_FORMAT",
	"UNSUPPORTED", "NO_MODEL", "CONTEXT_FULL", "INVALID_UTF8", "BUFFER_TOO_SMALL",
	"WRONG_THREAD", "STOPPED", "END", "HELPER_LOST"}

// String is the status's name in wasmind.h without its prefix: "BAD_FORMAT", ..., "TRAP".
func (s Status) String() string {
	if s == Trap {
		return "TRAP"
	}
	if s >= 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("STATUS_%d", int32(s))
}

func (s Status) Error() string { return "wasmind: " + s.String() }

// Error is a failed call: the module's status and the message it left in last_error (or the
// host's, for failures found before the call).
type Error struct {
	Status  Status
	Message string
}

func (e *Error) Error() string { return "wasmind: " + e.Status.String() + ": " + e.Message }

// Is makes errors.Is(err, wasmind.BadFormat) true for an *Error of that status.
func (e *Error) Is(target error) bool {
	s, ok := target.(Status)
	return ok && s == e.Status
}

// ErrClosed is returned by every call on an Instance after Close.
var ErrClosed = errors.New("wasmind: the instance is closed")

func errorf(s Status, format string, args ...any) *Error {
	return &Error{Status: s, Message: fmt.Sprintf(format, args...)}
}
