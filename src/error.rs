//! Status codes and the last error message.
//!
//! Every fallible export returns an `i32`: `>= 0` is success (a count, a size or 0), `< 0` is
//! `-(Status as i32)`. The message of the last failure is kept in the shared state block and
//! read through `last_error` / `last_error_len`. The codes are mirrored in `abi/wasmind.h`.

use alloc::string::String;
use core::fmt;

/// Why a call failed. Values are part of the ABI: never renumber, only append.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    // A table, one documented line per status (abi/wasmind.h has the same list as C constants).
    /// An argument is out of range (null pointer, bad length, unknown id, a sampler setting that
    /// is NaN or negative).
    InvalidArgument = 1,
    /// An allocation failed; nothing was changed (the message names what and how much, and the
    /// size of the memory).
    OutOfMemory = 2,
    /// Input bytes are malformed (truncated file, bad header, inconsistent sizes).
    BadFormat = 3,
    /// Input is well formed but uses something not implemented (tensor type, architecture).
    Unsupported = 4,
    /// The call needs a model (or embedder) and none is loaded.
    NoModel = 5,
    /// The KV cache is full; nothing was written past its end (`chat_reset`, or turn dropping,
    /// makes room).
    ContextFull = 6,
    /// Text is not valid UTF-8.
    InvalidUtf8 = 7,
    /// The caller's output buffer is too small; the required size is in the message.
    BufferTooSmall = 8,
    /// The call is not allowed from this build or this thread (e.g. helpers in the
    /// single-threaded build).
    WrongThread = 9,
    /// Generation was stopped through the stop flag.
    Stopped = 10,
    /// The reply is complete (an end-of-generation token or the token limit): not a failure,
    /// the status `chat_next` returns once a reply is over.
    End = 11,
    /// A helper thread stopped mid-job (it trapped, or its worker was terminated): the job made
    /// no progress for 3 s (the pool's stall limit). Later compute calls fail the same way;
    /// unloading still works, and a new module (fresh memory, fresh helpers) starts over.
    HelperLost = 12,
}

impl Status {
    pub const fn code(self) -> i32 {
        -(self as i32)
    }
    pub const fn name(self) -> &'static str {
        match self {
            Status::InvalidArgument => "invalid argument",
            Status::OutOfMemory => "out of memory",
            Status::BadFormat => "bad format",
            Status::Unsupported => "unsupported",
            Status::NoModel => "no model loaded",
            Status::ContextFull => "context full",
            Status::InvalidUtf8 => "invalid UTF-8",
            Status::BufferTooSmall => "buffer too small",
            Status::WrongThread => "wrong thread or build",
            Status::Stopped => "stopped",
            Status::End => "end of reply",
            Status::HelperLost => "helper thread lost",
        }
    }
}

/// An error with its message. Small (a status and a heap string), so `Result`s stay cheap to
/// pass around; building the message allocates, and when even that fails the message is a fixed
/// note instead (the status is always kept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub status: Status,
    pub message: ErrorText,
}

impl Error {
    pub fn new(status: Status, args: fmt::Arguments<'_>) -> Error {
        let mut message = ErrorText::new();
        if fmt::write(&mut message, args).is_err() {
            message = ErrorText::LOST;
        }
        Error { status, message }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status.name(), self.message.as_str())
    }
}

pub type Result<T> = core::result::Result<T, Error>;

/// `err!(Status::BadFormat, "tensor {} ...", name)` builds an [`Error`].
#[macro_export]
macro_rules! err {
    ($status:expr, $($arg:tt)*) => {
        $crate::error::Error::new($status, format_args!($($arg)*))
    };
}

/// `bail!(Status::BadFormat, "...")` returns an [`Error`] from the enclosing function.
#[macro_export]
macro_rules! bail {
    ($status:expr, $($arg:tt)*) => {
        return Err($crate::err!($status, $($arg)*))
    };
}

/// A UTF-8 message of at most [`ErrorText::CAPACITY`] bytes; longer text is cut at a character
/// boundary. Writing it never aborts on a failed allocation: the write reports an error instead.
#[derive(Clone, PartialEq, Eq)]
pub struct ErrorText(MessageText);

#[derive(Clone, PartialEq, Eq)]
enum MessageText {
    Owned(String),
    Fixed(&'static str),
}

impl ErrorText {
    pub const CAPACITY: usize = 480;
    /// What a message says when its text could not be allocated.
    pub const LOST: ErrorText = ErrorText(MessageText::Fixed(
        "(no message: out of memory while writing it)",
    ));

    pub const fn new() -> ErrorText {
        ErrorText(MessageText::Owned(String::new()))
    }

    pub fn as_str(&self) -> &str {
        match &self.0 {
            MessageText::Owned(s) => s,
            MessageText::Fixed(s) => s,
        }
    }
}

impl Default for ErrorText {
    fn default() -> Self {
        ErrorText::new()
    }
}

impl fmt::Debug for ErrorText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Write for ErrorText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let MessageText::Owned(text) = &mut self.0 else {
            return Ok(());
        };
        let mut take = s.len().min(ErrorText::CAPACITY - text.len());
        while !s.is_char_boundary(take) {
            take -= 1;
        }
        text.try_reserve(take).map_err(|_| fmt::Error)?;
        text.push_str(&s[..take]);
        Ok(())
    }
}

const _: () = assert!(core::mem::size_of::<Error>() <= 48);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_is_cut_at_a_char_boundary() {
        let long = "é".repeat(400); // 800 bytes
        let e = err!(Status::BadFormat, "{}", long);
        assert_eq!(e.message.as_str().len(), ErrorText::CAPACITY);
        assert!(e.message.as_str().chars().all(|c| c == 'é'));
    }

    #[test]
    fn codes_are_negative() {
        assert_eq!(Status::OutOfMemory.code(), -2);
        let e = err!(
            Status::Unsupported,
            "tensor {} has type {}",
            "blk.0.attn_q.weight",
            99
        );
        assert_eq!(e.message.as_str(), "tensor blk.0.attn_q.weight has type 99");
    }
}
