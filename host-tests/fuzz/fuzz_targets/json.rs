//! The JSON reader on any bytes: walking a document (every key and string unescaped, numbers
//! read) either succeeds or fails with an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wasmind::json::{Kind, Reader};

fn walk(r: &mut Reader<'_>, depth: u32) -> wasmind::error::Result<()> {
    match r.peek()? {
        Kind::Object => {
            r.begin_object()?;
            while let Some(k) = r.next_key()? {
                let _ = k.to_cow();
                walk(r, depth + 1)?;
            }
        }
        Kind::Array => {
            r.begin_array()?;
            while r.next_item()? {
                walk(r, depth + 1)?;
            }
        }
        Kind::String => {
            let _ = r.read_str()?.to_cow();
        }
        Kind::Number => {
            let _ = r.read_f64()?;
        }
        _ => r.skip_value()?,
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    if let Ok(mut r) = Reader::new(data) {
        if walk(&mut r, 0).is_ok() {
            let _ = r.finish();
        }
    }
    if let Ok(mut r) = Reader::new(data) {
        let _ = r.skip_value();
    }
});
