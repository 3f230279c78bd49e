//! A Jinja engine for the chat templates models publish (`tokenizer.chat_template`), rendering
//! them as Hugging Face `transformers.apply_chat_template` does with `jinja2`: its
//! ImmutableSandboxedEnvironment with `trim_blocks` and `lstrip_blocks`, the loop controls
//! (`break`, `continue`), `raise_exception`, `strftime_now`, and transformers' `tojson`
//! (`json.dumps` with `ensure_ascii=False`, `indent`, `separators`, `sort_keys`).
//!
//! ```text
//! template text --parse.rs--> nodes (lexer with Jinja2's whitespace rules, then a parser)
//! variables (JSON: messages, tools, add_generation_prompt, bos_token, ...) --value.rs--> Value
//! nodes + variables --eval.rs--> text (Python's semantics for values and operators)
//! ```
//!
//! What is there: `if`/`elif`/`else`, `for` (with `else`, an `if` filter, `loop.*`, tuple
//! targets), `set` (names, tuples, `ns.attr`, blocks), `macro` (defaults, `caller`), `call`,
//! `filter` blocks, `raw`, `generation` (transformers' tag; its body renders as it is);
//! expressions with Python's operators, slicing, literals, conditional expressions; the filters,
//! tests and string/dict/list methods chat templates use. Not there: template inheritance and
//! includes (a chat template is one string), recursive loops, async.
//!
//! Hostile templates fail cleanly: the template's size and nesting are capped when parsed, and a
//! rendering is held to [`Limits`] (output bytes, steps, macro depth). Errors name the line and
//! column of the template.

mod eval;
mod parse;
mod value;

#[cfg(test)]
mod tests;

use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;

pub use eval::{DateTime, Limits};
pub use value::Value;

use crate::bail;
use crate::error::{Result, Status};

/// A parsed template, to render any number of times.
pub struct Template {
    src: String,
    nodes: Vec<parse::Node>,
}

impl Template {
    pub fn parse(src: &str) -> Result<Template> {
        Ok(Template {
            src: src.into(),
            nodes: parse::parse(src)?,
        })
    }

    /// Renders with the variables of `vars` (a dict: `messages`, `tools`, `bos_token`, ...),
    /// `now` the clock `strftime_now` reads (None: calling it is an error).
    pub fn render(&self, vars: &Value, limits: Limits, now: Option<DateTime>) -> Result<String> {
        let Value::Dict(d) = vars else {
            bail!(
                Status::InvalidArgument,
                "template variables must be a JSON object, not {}",
                vars.type_name()
            );
        };
        let frame =
            d.0.iter()
                .filter_map(|(k, v)| Some((Rc::from(k.as_str()?), v.clone())))
                .collect();
        eval::Renderer::new(&self.src, frame, limits, now).render(&self.nodes)
    }
}

/// Renders `template` over the JSON object `vars` (every key a variable, as transformers
/// passes `messages`, `tools`, `documents`, `add_generation_prompt`, the special tokens and any
/// extra keyword).
pub fn render_json(
    template: &str,
    vars: &[u8],
    limits: Limits,
    now: Option<DateTime>,
) -> Result<String> {
    Template::parse(template)?.render(&Value::from_json(vars)?, limits, now)
}
