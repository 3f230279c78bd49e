//! Chat templates: a conversation's messages -> the prompt text the model was trained on.
//!
//! Every template here is held byte for byte to llama.cpp's built-in one
//! (`llama_chat_apply_template`, the code llama.cpp runs when it recognises a GGUF's template;
//! `shared/reference/templates.json` and `host-tests/testdata/templates-extra.json` hold its
//! output). A GGUF names its template as a Jinja program (`tokenizer.chat_template`) that we do
//! not run: like llama.cpp's `llm_chat_detect_template`, [`Template::detect`] recognises it by the
//! markers it writes (`<|im_start|>`, `[INST]`, `<start_of_turn>`, ...), in llama.cpp's order.
//! One that llama.cpp knows and we do not render, or none at all, means ChatML with a warning.
//!
//! A template is data ([`Spec`], one row of [`SPECS`]): each role's opening and closing markup
//! around the message text, a few placement rules (Gemma folds system text into the next user
//! turn, Hunyuan keeps only a leading system message, `[INST]` templates open and close turns),
//! and the text that opens the reply (the generation prompt, llama.cpp's `add_ass`).
//!
//! Rendering is incremental: [`Template::render`] writes messages `from..` as they follow the
//! earlier ones, so a conversation held in a KV cache appends only its new turns. Rendering
//! `..k` and then `k..` equals rendering everything in one piece, by construction (the state
//! a template carries from message to message is replayed, not written). After a reply the
//! cache holds the generation prompt and the sampled tokens, not the template's assistant
//! markup; the two agree when the reply starts with what the assistant opening has beyond the
//! generation prompt (a space for Mistral and Vicuna: the model writes it), except for:
//! - `hunyuan-dense`: llama.cpp writes `<｜hy_Assistant｜>` both at the end of a user message
//!   and before an assistant message, so a re-read history holds it twice where the cache
//!   holds it once;
//! - templates that trim message text (Llama 3, Gemma, Command R, ...): a reply that began or
//!   ended with whitespace is trimmed when the history is re-read;
//! - `qwen3` with thinking off: the cache keeps the empty `<think>` block in front of each
//!   reply, a re-read history does not (as Qwen3's own template drops reasoning from history);
//!   with thinking on, a re-read history keeps a reply's `<think>...</think>` text, which
//!   Qwen3's template would strip (we do not parse replies).
//!
//! The history is re-read only after a reset, dropped turns, or a new template or think option.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

use crate::error::{Result, Status};
use crate::json::Reader;
use crate::{bail, err};

/// Who says a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    System,
    User,
    Assistant,
    /// Text fed as it is, with no template markup; a reply continues it (completion mode).
    Raw,
}

impl Role {
    /// The role of the ABI's number (`chat_add`).
    pub fn from_u32(v: u32) -> Result<Role> {
        Ok(match v {
            0 => Role::System,
            1 => Role::User,
            2 => Role::Assistant,
            3 => Role::Raw,
            _ => bail!(
                Status::InvalidArgument,
                "chat role {} is not 0 system, 1 user, 2 assistant or 3 raw",
                v
            ),
        })
    }
}

#[derive(Clone, Debug)]
pub struct Message {
    pub role: Role,
    pub text: String,
}

/// One role's markup: `open`, the message text (without C `isspace` whitespace at either end
/// when `trim`), `close`.
#[derive(Clone, Copy, Debug)]
struct Part {
    open: &'static str,
    close: &'static str,
    trim: bool,
}

const fn keep(open: &'static str, close: &'static str) -> Part {
    Part {
        open,
        close,
        trim: false,
    }
}

const fn trim(open: &'static str, close: &'static str) -> Part {
    Part {
        open,
        close,
        trim: true,
    }
}

/// Where system messages go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SystemRule {
    /// Where they stand, with the system markup.
    Inline,
    /// Gathered (trimmed, joined with nothing) and written at the start of the next user
    /// message, followed by this separator (Gemma has no system role).
    Fold(&'static str),
    /// Only a system message that opens the conversation is written.
    FirstOnly,
}

struct Spec {
    name: &'static str,
    /// Written once, before the first message. For `[INST]` templates a non-empty `begin`
    /// opens the first turn.
    begin: &'static str,
    system: Part,
    user: Part,
    assistant: Part,
    system_rule: SystemRule,
    /// `[INST]` turns: written before a message when no turn is open; an assistant message
    /// closes the turn.
    turn: Option<&'static str>,
    /// What opens the reply (`add_ass`); empty where llama.cpp writes none.
    generation: &'static str,
    /// Written after `generation` unless the model may think (Qwen3's empty reasoning block).
    no_think: &'static str,
    /// A control token the template writes, to check that the vocabulary has it.
    marker: &'static str,
}

impl Spec {
    /// The common shape: one markup per role, system messages in place.
    const fn roles(
        name: &'static str,
        system: Part,
        user: Part,
        assistant: Part,
        generation: &'static str,
        marker: &'static str,
    ) -> Spec {
        Spec {
            name,
            begin: "",
            system,
            user,
            assistant,
            system_rule: SystemRule::Inline,
            turn: None,
            generation,
            no_think: "",
            marker,
        }
    }

    /// Llama 2 and Mistral v1/v3: `[INST] ... [/INST] reply</s>`, no generation prompt.
    const fn inst(
        name: &'static str,
        begin: &'static str,
        turn: &'static str,
        system: Part,
        user: Part,
        assistant: Part,
    ) -> Spec {
        Spec {
            begin,
            turn: Some(turn),
            ..Spec::roles(name, system, user, assistant, "", "</s>")
        }
    }
}

/// Every template, in the order of their `chat_set_template` ids (1-based; 1..=5 are the ids
/// the first ABI gave ChatML, Llama 3, Gemma, Llama 2 with `<<SYS>>` and Mistral).
const SPECS: &[Spec] = &[
    Spec::roles(
        "chatml",
        keep("<|im_start|>system\n", "<|im_end|>\n"),
        keep("<|im_start|>user\n", "<|im_end|>\n"),
        keep("<|im_start|>assistant\n", "<|im_end|>\n"),
        "<|im_start|>assistant\n",
        "<|im_start|>",
    ),
    Spec::roles(
        "llama3",
        trim(
            "<|start_header_id|>system<|end_header_id|>\n\n",
            "<|eot_id|>",
        ),
        trim("<|start_header_id|>user<|end_header_id|>\n\n", "<|eot_id|>"),
        trim(
            "<|start_header_id|>assistant<|end_header_id|>\n\n",
            "<|eot_id|>",
        ),
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "<|start_header_id|>",
    ),
    Spec {
        system_rule: SystemRule::Fold("\n\n"),
        ..Spec::roles(
            "gemma",
            trim("", ""),
            trim("<start_of_turn>user\n", "<end_of_turn>\n"),
            trim("<start_of_turn>model\n", "<end_of_turn>\n"),
            "<start_of_turn>model\n",
            "<start_of_turn>",
        )
    },
    Spec::inst(
        "llama2-sys",
        "[INST] ",
        "[INST] ",
        keep("<<SYS>>\n", "\n<</SYS>>\n\n"),
        keep("", " [/INST]"),
        keep("", "</s>"),
    ),
    Spec::inst(
        "mistral-v1",
        "",
        " [INST] ",
        keep("", "\n\n"),
        keep("", " [/INST]"),
        keep(" ", "</s>"),
    ),
    Spec::inst(
        "llama2",
        "[INST] ",
        "[INST] ",
        keep("", "\n"),
        keep("", " [/INST]"),
        keep("", "</s>"),
    ),
    Spec::inst(
        "llama2-sys-bos",
        "[INST] ",
        "<s>[INST] ",
        keep("<<SYS>>\n", "\n<</SYS>>\n\n"),
        keep("", " [/INST]"),
        keep("", "</s>"),
    ),
    Spec::inst(
        "llama2-sys-strip",
        "[INST] ",
        "[INST] ",
        trim("<<SYS>>\n", "\n<</SYS>>\n\n"),
        trim("", " [/INST]"),
        trim("", "</s>"),
    ),
    Spec::inst(
        "mistral-v3",
        "",
        "[INST] ",
        keep("", "\n\n"),
        keep("", "[/INST]"),
        trim(" ", "</s>"),
    ),
    Spec::inst(
        "mistral-v3-tekken",
        "",
        "[INST]",
        keep("", "\n\n"),
        keep("", "[/INST]"),
        keep("", "</s>"),
    ),
    Spec::roles(
        "mistral-v7",
        keep("[SYSTEM_PROMPT] ", "[/SYSTEM_PROMPT]"),
        keep("[INST] ", "[/INST]"),
        keep(" ", "</s>"),
        "",
        "</s>",
    ),
    Spec::roles(
        "mistral-v7-tekken",
        keep("[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"),
        keep("[INST]", "[/INST]"),
        keep("", "</s>"),
        "",
        "</s>",
    ),
    Spec::roles(
        "phi3",
        keep("<|system|>\n", "<|end|>\n"),
        keep("<|user|>\n", "<|end|>\n"),
        keep("<|assistant|>\n", "<|end|>\n"),
        "<|assistant|>\n",
        "<|end|>",
    ),
    Spec::roles(
        "phi4",
        keep("<|im_start|>system<|im_sep|>", "<|im_end|>"),
        keep("<|im_start|>user<|im_sep|>", "<|im_end|>"),
        keep("<|im_start|>assistant<|im_sep|>", "<|im_end|>"),
        "<|im_start|>assistant<|im_sep|>",
        "<|im_sep|>",
    ),
    Spec::roles(
        "zephyr",
        keep("<|system|>\n", "<|endoftext|>\n"),
        keep("<|user|>\n", "<|endoftext|>\n"),
        keep("<|assistant|>\n", "<|endoftext|>\n"),
        "<|assistant|>\n",
        "<|endoftext|>",
    ),
    Spec::roles(
        "vicuna",
        keep("", "\n\n"),
        keep("USER: ", "\n"),
        keep("ASSISTANT: ", "</s>\n"),
        "ASSISTANT:",
        "</s>",
    ),
    Spec::roles(
        "deepseek3",
        keep("", "\n\n"),
        keep("<｜User｜>", ""),
        keep("<｜Assistant｜>", "<｜end▁of▁sentence｜>"),
        "<｜Assistant｜>",
        "<｜end▁of▁sentence｜>",
    ),
    Spec::roles(
        "granite",
        keep(
            "<|start_of_role|>system<|end_of_role|>",
            "<|end_of_text|>\n",
        ),
        keep("<|start_of_role|>user<|end_of_role|>", "<|end_of_text|>\n"),
        keep(
            "<|start_of_role|>assistant<|end_of_role|>",
            "<|end_of_text|>\n",
        ),
        "<|start_of_role|>assistant<|end_of_role|>",
        "<|start_of_role|>",
    ),
    Spec {
        begin: "<|im_start|>",
        ..Spec::roles(
            "smolvlm",
            keep("", "\n\n"),
            keep("User: ", "<end_of_utterance>\n"),
            keep("Assistant: ", "<end_of_utterance>\n"),
            "Assistant:",
            "<end_of_utterance>",
        )
    },
    Spec::roles(
        "falcon3",
        keep("<|system|>\n", "\n"),
        keep("<|user|>\n", "\n"),
        keep("<|assistant|>\n", "\n"),
        "<|assistant|>\n",
        "<|assistant|>",
    ),
    Spec::roles(
        "command-r",
        trim(
            "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>",
            "<|END_OF_TURN_TOKEN|>",
        ),
        trim(
            "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>",
            "<|END_OF_TURN_TOKEN|>",
        ),
        trim(
            "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
            "<|END_OF_TURN_TOKEN|>",
        ),
        "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
        "<|END_OF_TURN_TOKEN|>",
    ),
    Spec::roles(
        "exaone3",
        trim("[|system|]", "[|endofturn|]\n"),
        trim("[|user|]", "\n"),
        trim("[|assistant|]", "[|endofturn|]\n"),
        "[|assistant|]",
        "[|endofturn|]",
    ),
    Spec::roles(
        "llama4",
        trim("<|header_start|>system<|header_end|>\n\n", "<|eot|>"),
        trim("<|header_start|>user<|header_end|>\n\n", "<|eot|>"),
        trim("<|header_start|>assistant<|header_end|>\n\n", "<|eot|>"),
        "<|header_start|>assistant<|header_end|>\n\n",
        "<|header_start|>",
    ),
    Spec {
        system_rule: SystemRule::FirstOnly,
        ..Spec::roles(
            "hunyuan-dense",
            keep("", "<｜hy_place▁holder▁no▁3｜>"),
            keep("<｜hy_User｜>", "<｜hy_Assistant｜>"),
            keep("<｜hy_Assistant｜>", "<｜hy_place▁holder▁no▁2｜>"),
            "",
            "<｜hy_User｜>",
        )
    },
    // Not one of llama.cpp's built-in templates (it runs Qwen3's Jinja program): ChatML, and
    // when thinking is off the empty reasoning block Qwen3's template writes for
    // `enable_thinking=false` in front of the reply.
    Spec {
        no_think: "<think>\n\n</think>\n\n",
        ..Spec::roles(
            "qwen3",
            keep("<|im_start|>system\n", "<|im_end|>\n"),
            keep("<|im_start|>user\n", "<|im_end|>\n"),
            keep("<|im_start|>assistant\n", "<|im_end|>\n"),
            "<|im_start|>assistant\n",
            "<|im_start|>",
        )
    },
    // DeepSeek Coder: system text as it is, then instruction and response blocks.
    Spec::roles(
        "deepseek",
        keep("", ""),
        keep("### Instruction:\n", "\n"),
        keep("### Response:\n", "\n<|EOT|>\n"),
        "### Response:\n",
        "<|EOT|>",
    ),
];

/// llama.cpp's recognition rules after the ChatML and `[INST]` families, in its order: a
/// template holding every marker of a row is that row's template. Rows name templates we do
/// not render too, so that their programs are not taken for a later row's.
const RULES: &[(&[&str], &str)] = &[
    (&["<|assistant|>", "<|end|>"], "phi3"),
    (&["[gMASK]<sop>"], "chatglm4"),
    (
        &["<|assistant|>", "<|user|>", "<|tool_declare|>"],
        "exaone-moe",
    ),
    (&["<|assistant|>", "<|user|>", "</s>"], "falcon3"),
    (&["<|assistant|>", "<|user|>"], "glmedge"),
    (&["<|{{ item['role'] }}|>", "<|begin_of_image|>"], "glmedge"),
    (&["<|user|>", "<|endoftext|>"], "zephyr"),
    (&["bos_token + message['role']"], "monarch"),
    (&["<start_of_turn>"], "gemma"),
    (&["'\\n\\nAssistant: ' + eos_token"], "orion"),
    (&["GPT4 Correct "], "openchat"),
    (&["USER: ", "ASSISTANT: ", "SYSTEM: "], "vicuna-orca"),
    (&["USER: ", "ASSISTANT: "], "vicuna"),
    (&["### Instruction:", "<|EOT|>"], "deepseek"),
    (&["<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>"], "command-r"),
    (&["<|start_header_id|>", "<|end_header_id|>"], "llama3"),
    (&["[gMASK]sop"], "chatglm3"),
    (&["<用户>"], "minicpm"),
    (
        &["'Assistant: ' + message['content'] + eos_token"],
        "deepseek2",
    ),
    (
        &["<｜Assistant｜>", "<｜User｜>", "<｜end▁of▁sentence｜>"],
        "deepseek3",
    ),
    (
        &["[|system|]", "[|assistant|]", "[|endofturn|]", "[|tool|]"],
        "exaone4",
    ),
    (&["[|system|]", "[|assistant|]", "[|endofturn|]"], "exaone3"),
    (&["rwkv-world"], "rwkv-world"),
    (
        &["{{- 'User: ' + message['content']|trim + '\\n\\n' -}}"],
        "rwkv-world",
    ),
    (
        &[
            "<|start_of_role|>",
            "<tool_call>",
            "g4_default_system_message",
        ],
        "granite-4.0",
    ),
    (
        &["<|start_of_role|>", "<tools>", "g4_default_system_message"],
        "granite-4.0",
    ),
    (&["<|start_of_role|>", "<tool_call>"], "granite-4.1"),
    (&["<|start_of_role|>", "<tools>"], "granite-4.1"),
    (&["<|start_of_role|>"], "granite"),
    (
        &[
            "message['role'] + additional_special_tokens[0] + message['content'] + additional_special_tokens[1]",
        ],
        "gigachat",
    ),
    (&["<|role_start|>"], "megrez"),
    (&[" Ассистент:"], "yandex"),
    (&["<role>ASSISTANT</role>", "'HUMAN'"], "bailing"),
    (
        &["<role>ASSISTANT</role>", "\"HUMAN\"", "<think>"],
        "bailing-think",
    ),
    (
        &[
            "<role>ASSISTANT</role>",
            "<role>HUMAN</role>",
            "<|role_end|>",
        ],
        "bailing2",
    ),
    (&["<|header_start|>", "<|header_end|>"], "llama4"),
    (&["<|endofuserprompt|>"], "dots1"),
    (&["<|extra_0|>", "<|extra_4|>"], "hunyuan-moe"),
    (&["<|start|>", "<|channel|>"], "gpt-oss"),
    (
        &["<｜hy_Assistant｜>", "<｜hy_begin▁of▁sentence｜>"],
        "hunyuan-vl",
    ),
    (
        &["<｜hy_Assistant｜>", "<｜hy_place▁holder▁no▁3｜>"],
        "hunyuan-dense",
    ),
    (&["<|im_assistant|>assistant<|im_middle|>"], "kimi-k2"),
    (&["<seed:bos>"], "seed_oss"),
    (
        &["'Assistant: '  + message['content'] + '<|separator|>"],
        "grok-2",
    ),
    (&["[unused9]系统：[unused10]"], "pangu-embedded"),
    (&["<|begin|>", "<|end|>", "<|content|>"], "solar-open"),
];

/// llama.cpp's choice within the `[INST]` family.
fn detect_inst(s: &str) -> &'static str {
    if s.contains("[SYSTEM_PROMPT]") {
        "mistral-v7"
    } else if s.contains("' [INST] ' + system_message") || s.contains("[AVAILABLE_TOOLS]") {
        if s.contains(" [INST]") {
            "mistral-v1"
        } else if s.contains("\"[INST]\"") {
            "mistral-v3-tekken"
        } else {
            "mistral-v3"
        }
    } else if s.contains("content.strip()") {
        "llama2-sys-strip"
    } else if s.contains("bos_token + '[INST]") {
        "llama2-sys-bos"
    } else if s.contains("<<SYS>>") {
        "llama2-sys"
    } else {
        "llama2"
    }
}

/// The name llama.cpp would give a template program (None: it recognises none). Qwen3's
/// program, ChatML to llama.cpp, is told apart by its `enable_thinking` switch.
fn detect_name(s: &str) -> Option<&str> {
    if Template::from_name(s).is_some() {
        return Some(s);
    }
    if s.contains("<|im_start|>") {
        return Some(if s.contains("<|im_sep|>") {
            "phi4"
        } else if s.contains("<end_of_utterance>") {
            "smolvlm"
        } else if s.contains("<think>") && s.contains("enable_thinking") {
            "qwen3"
        } else {
            "chatml"
        });
    }
    if s.starts_with("mistral") || s.contains("[INST]") {
        return Some(detect_inst(s));
    }
    RULES
        .iter()
        .find(|(markers, _)| markers.iter().all(|m| s.contains(m)))
        .map(|&(_, name)| name)
}

/// Without C `isspace` white space at either end (what llama.cpp trims), not Unicode spaces.
fn trim_c(s: &str) -> &str {
    s.trim_matches(|c| crate::unicode::is_c_space(c as u32))
}

fn put(out: &mut String, live: bool, parts: &[&str]) {
    if live {
        for p in parts {
            out.push_str(p);
        }
    }
}

/// A chat template: an index into [`SPECS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Template(u8);

impl Template {
    pub const CHATML: Template = Template(0);
    pub const LLAMA3: Template = Template(1);
    pub const GEMMA: Template = Template(2);

    fn spec(self) -> &'static Spec {
        &SPECS[self.0 as usize]
    }

    /// Every template, in id order.
    pub fn all() -> impl Iterator<Item = Template> {
        (0..SPECS.len() as u8).map(Template)
    }

    /// `chat_set_template` ids: 1.. in table order (0 means the model's own, elsewhere).
    pub fn from_id(id: u32) -> Option<Template> {
        let i = usize::try_from(id).ok()?.checked_sub(1)?;
        (i < SPECS.len()).then_some(Template(i as u8))
    }

    pub fn id(self) -> u32 {
        self.0 as u32 + 1
    }

    pub fn from_name(name: &str) -> Option<Template> {
        Template::all().find(|t| t.name() == name)
    }

    /// llama.cpp's name for it (`qwen3` is ours).
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// The known names, comma-separated (for error messages).
    pub fn names(out: &mut String) {
        for (i, t) in Template::all().enumerate() {
            let _ = write!(out, "{}{}", if i > 0 { ", " } else { "" }, t.name());
        }
    }

    /// The template of a `tokenizer.chat_template` program, by the markers it writes as
    /// llama.cpp recognises them (a program that is exactly a template's name is that
    /// template); ChatML and a warning when there is none or we do not render the one found.
    pub fn detect(source: Option<&str>) -> (Template, Option<String>) {
        let Some(s) = source else {
            return (
                Template::CHATML,
                Some("the model has no tokenizer.chat_template; using ChatML".into()),
            );
        };
        match detect_name(s) {
            Some(name) => match Template::from_name(name) {
                Some(t) => (t, None),
                None => {
                    let mut w = String::new();
                    let _ = write!(
                        w,
                        "llama.cpp reads tokenizer.chat_template as its \"{name}\" template, which wasmind does not render; using ChatML"
                    );
                    (Template::CHATML, Some(w))
                }
            },
            None => (
                Template::CHATML,
                Some("unrecognised tokenizer.chat_template; using ChatML".into()),
            ),
        }
    }

    /// For a file without `tokenizer.chat_template` (a base model, often): the first of a few
    /// families whose control token the vocabulary has (a base model's vocabulary still carries
    /// its family's turn markers: Gemma 3 270M's has `<start_of_turn>`), else ChatML. Returns
    /// the template and the warning that says how it was chosen.
    pub fn for_vocabulary(has_token: impl Fn(&str) -> bool) -> (Template, String) {
        for name in ["chatml", "gemma", "llama3", "phi3"] {
            let Some(t) = Template::from_name(name) else {
                continue;
            };
            if has_token(t.marker()) {
                let mut w = String::new();
                let _ = write!(
                    w,
                    "the model has no tokenizer.chat_template; using {name}, whose {} is in its vocabulary",
                    t.marker()
                );
                return (t, w);
            }
        }
        (
            Template::CHATML,
            "the model has no tokenizer.chat_template; using ChatML".into(),
        )
    }

    /// A control token the template writes, to check that the vocabulary has it.
    pub fn marker(self) -> &'static str {
        self.spec().marker
    }

    /// Appends what opens the model's reply (llama.cpp's `add_ass`); `think`: let a model
    /// that can reason do so (Qwen3: no empty `<think>` block).
    pub fn open_reply(self, think: bool, out: &mut String) {
        let s = self.spec();
        out.push_str(s.generation);
        if !think {
            out.push_str(s.no_think);
        }
    }

    /// What closes a reply the model ended (its end token is not in the cache).
    pub fn close(self) -> &'static str {
        self.spec().assistant.close
    }

    /// Appends the text of `messages[from..]`, as it follows `messages[..from]` (rendered
    /// before; their text is not written again, but the state they leave is replayed: a
    /// system text waiting for the next user turn, an open `[INST]` turn, the first
    /// message). `from == 0` renders the conversation as llama.cpp does, without the
    /// generation prompt ([`Template::open_reply`]). Raw messages go through as they are.
    pub fn render(self, messages: &[Message], from: usize, out: &mut String) {
        let s = self.spec();
        put(out, from == 0, &[s.begin]);
        let mut in_turn = !s.begin.is_empty();
        let mut folded = String::new();
        for (i, m) in messages.iter().enumerate() {
            let live = i >= from;
            let part = match m.role {
                Role::Raw => {
                    put(out, live, &[&m.text]);
                    continue;
                }
                Role::System => s.system,
                Role::User => s.user,
                Role::Assistant => s.assistant,
            };
            if let Some(open) = s.turn.filter(|_| !in_turn) {
                put(out, live, &[open]);
                in_turn = true;
            }
            let text = if part.trim {
                trim_c(&m.text)
            } else {
                m.text.as_str()
            };
            match (m.role, s.system_rule) {
                (Role::System, SystemRule::Fold(_)) => {
                    if folded.try_reserve(text.len()).is_ok() {
                        folded.push_str(text);
                    }
                }
                (Role::System, SystemRule::FirstOnly) if i > 0 => {}
                (Role::User, SystemRule::Fold(sep)) if !folded.is_empty() => {
                    put(out, live, &[part.open, &folded, sep, text, part.close]);
                    folded.clear();
                }
                _ => put(out, live, &[part.open, text, part.close]),
            }
            if m.role == Role::Assistant {
                in_turn = false;
            }
        }
    }
}

/// A rendering request (`template_render`): `{"messages": [{"role": "system" | "user" |
/// "assistant", "content": "..."}, ...], "add_assistant": bool, "think": bool}` (both flags
/// false when absent; other keys are ignored).
pub struct Request {
    pub messages: Vec<Message>,
    pub add_assistant: bool,
    pub think: bool,
}

impl Request {
    pub fn parse(json: &[u8]) -> Result<Request> {
        let mut r = Reader::new(json)?;
        let mut req = Request {
            messages: Vec::new(),
            add_assistant: false,
            think: false,
        };
        r.begin_object()?;
        while let Some(key) = r.next_key()? {
            if key.eq_str("add_assistant") {
                req.add_assistant = r.read_bool()?;
            } else if key.eq_str("think") {
                req.think = r.read_bool()?;
            } else if key.eq_str("messages") {
                r.begin_array()?;
                while r.next_item()? {
                    req.messages
                        .try_reserve(1)
                        .map_err(|_| err!(Status::OutOfMemory, "chat messages"))?;
                    req.messages.push(read_message(&mut r)?);
                }
            } else {
                r.skip_value()?;
            }
        }
        r.finish()?;
        Ok(req)
    }
}

fn read_message(r: &mut Reader<'_>) -> Result<Message> {
    let (mut role, mut text) = (None, None);
    r.begin_object()?;
    while let Some(key) = r.next_key()? {
        if key.eq_str("role") {
            let v = r.read_str()?;
            role = Some(match () {
                _ if v.eq_str("system") => Role::System,
                _ if v.eq_str("user") => Role::User,
                _ if v.eq_str("assistant") => Role::Assistant,
                _ => bail!(
                    Status::InvalidArgument,
                    "message role \"{}\" is not system, user or assistant",
                    v.to_cow()?
                ),
            });
        } else if key.eq_str("content") {
            let mut s = String::new();
            r.read_str()?.decode_into(&mut s)?;
            text = Some(s);
        } else {
            r.skip_value()?;
        }
    }
    match (role, text) {
        (Some(role), Some(text)) => Ok(Message { role, text }),
        _ => bail!(
            Status::InvalidArgument,
            "a message needs a \"role\" and a \"content\" string"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A reference file: llama.cpp's renderings in the fixtures (`reference/templates.json`) or
    /// this repository's extra ones (`host-tests/testdata/...`).
    fn reference(p: &str) -> serde_json::Value {
        let bytes = match p.starts_with("host-tests/") {
            true => {
                let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(p);
                std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            }
            false => crate::testutil::read_fixture(p),
        };
        serde_json::from_slice(&bytes).unwrap()
    }

    fn messages(v: &serde_json::Value) -> Vec<Message> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|m| Message {
                role: match m["role"].as_str().unwrap() {
                    "system" => Role::System,
                    "user" => Role::User,
                    "assistant" => Role::Assistant,
                    r => panic!("role {r}"),
                },
                text: m["content"].as_str().unwrap().into(),
            })
            .collect()
    }

    /// llama.cpp's rendering: the messages and, with `add_ass`, the generation prompt.
    fn whole(t: Template, msgs: &[Message], add_ass: bool) -> String {
        let mut s = String::new();
        t.render(msgs, 0, &mut s);
        if add_ass {
            t.open_reply(true, &mut s);
        }
        s
    }

    /// Every rendering in a reference file equals ours; returns how many were compared.
    fn check_file(p: &str) -> usize {
        let r = reference(p);
        let mut n = 0;
        let mut failed = Vec::new();
        for (name, rows) in r["templates"].as_object().unwrap() {
            let t = Template::from_name(name).unwrap_or_else(|| panic!("no template {name}"));
            for row in rows.as_array().unwrap() {
                let msgs = messages(&row["messages"]);
                let got = whole(t, &msgs, row["add_ass"].as_bool().unwrap());
                let want = row["text"].as_str().unwrap();
                if got != want {
                    failed.push(std::format!(
                        "{name} {:?}:\n got {got:?}\nwant {want:?}",
                        row
                    ));
                }
                n += 1;
            }
        }
        assert!(failed.is_empty(), "{}", failed.join("\n"));
        n
    }

    #[test]
    fn templates_render_as_llama_cpp() {
        let n = check_file("reference/templates.json");
        std::println!("{n} renderings byte-identical to llama.cpp's");
        assert_eq!(n, 22 * 6 * 2);
    }

    /// Conversations templates.json does not hold (role orders, empty and white-space text,
    /// Unicode, system messages alone or several), for 25 templates.
    #[test]
    fn unseen_conversations_render_as_llama_cpp() {
        let n = check_file("host-tests/testdata/templates-extra.json");
        std::println!("{n} more renderings byte-identical to llama.cpp's");
        assert_eq!(n, 25 * 18 * 2);
    }

    /// The template programs gen_templates.py gave llama.cpp: we recognise each as it did.
    #[test]
    fn recognises_template_programs_as_llama_cpp() {
        let r = reference("host-tests/testdata/templates-extra.json");
        for d in r["detect"].as_array().unwrap() {
            let src = d["source"].as_str().unwrap();
            let (t, w) = Template::detect(Some(src));
            let alike = d["alike"].as_array().unwrap();
            match d["name"].as_str() {
                // Qwen3's program is ChatML to llama.cpp; we add its think switch.
                Some("chatml") if src.contains("enable_thinking") => {
                    assert_eq!((t.name(), w), ("qwen3", None), "{src}")
                }
                Some(name) if Template::from_name(name).is_some() => {
                    assert!(
                        alike.iter().any(|a| *a == t.name()) && w.is_none(),
                        "{src}: {t:?} {w:?}"
                    )
                }
                Some(name) => {
                    assert_eq!(t, Template::CHATML, "{src}");
                    assert!(w.unwrap().contains(name), "{src}");
                }
                None => assert!(w.unwrap().contains("unrecognised"), "{src}"),
            }
        }
    }

    /// Rendering `..k` and then `k..` gives the whole, for every split of every conversation.
    #[test]
    fn rendering_in_pieces_equals_the_whole() {
        let r = reference("reference/templates.json");
        for t in Template::all() {
            for row in r["templates"]["chatml"].as_array().unwrap() {
                let msgs = messages(&row["messages"]);
                let all = whole(t, &msgs, false);
                for k in 1..=msgs.len() {
                    let mut s = whole(t, &msgs[..k], false);
                    t.render(&msgs, k, &mut s);
                    assert_eq!(s, all, "{} split at {k}", t.name());
                }
            }
        }
    }

    /// What the chat does: the history and the generation prompt, the reply as the model
    /// writes it, then the closing markup and the next messages, equals llama.cpp's
    /// rendering of the whole conversation (except hunyuan-dense; see the module notes).
    #[test]
    fn a_conversation_held_in_the_cache_renders_as_the_whole() {
        let r = reference("reference/templates.json");
        let mut checked = 0;
        for t in Template::all().filter(|t| t.name() != "hunyuan-dense") {
            let s = t.spec();
            for row in r["templates"]["chatml"].as_array().unwrap() {
                let msgs = messages(&row["messages"]);
                for (a, m) in msgs.iter().enumerate() {
                    if m.role != Role::Assistant {
                        continue;
                    }
                    let mut cached = whole(t, &msgs[..a], true);
                    // The model writes what the assistant opening has beyond the generation
                    // prompt (the space after Mistral's `[/INST]`), then its text.
                    let lead = s.assistant.open.strip_prefix(s.generation).unwrap();
                    cached.push_str(lead);
                    cached.push_str(&m.text);
                    cached.push_str(t.close());
                    t.render(&msgs, a + 1, &mut cached);
                    t.open_reply(true, &mut cached);
                    assert_eq!(cached, whole(t, &msgs, true), "{}", t.name());
                    checked += 1;
                }
            }
        }
        assert!(checked > 40);
    }

    #[test]
    fn qwen3_writes_an_empty_think_block_unless_it_may_think() {
        let t = Template::from_name("qwen3").unwrap();
        let msgs = [Message {
            role: Role::User,
            text: "Hi".into(),
        }];
        let mut off = String::new();
        t.render(&msgs, 0, &mut off);
        let mut on = off.clone();
        t.open_reply(false, &mut off);
        t.open_reply(true, &mut on);
        assert_eq!(
            off,
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
        );
        assert_eq!(on, whole(Template::CHATML, &msgs, true));
        // Other templates ignore the option.
        let mut s = String::new();
        Template::CHATML.open_reply(false, &mut s);
        assert_eq!(s, "<|im_start|>assistant\n");
    }

    #[test]
    fn names_and_ids() {
        // The first ABI's ids keep their meaning.
        for (id, name) in [
            (1, "chatml"),
            (2, "llama3"),
            (3, "gemma"),
            (4, "llama2-sys"),
            (5, "mistral-v1"),
        ] {
            assert_eq!(Template::from_id(id).unwrap().name(), name);
        }
        let n = Template::all().count() as u32;
        for t in Template::all() {
            assert_eq!(Template::from_id(t.id()), Some(t));
            assert_eq!(Template::from_name(t.name()), Some(t));
        }
        assert_eq!(Template::from_id(0), None);
        assert_eq!(Template::from_id(n + 1), None);
        assert_eq!(Template::from_name("nope"), None);
        let mut names = String::new();
        Template::names(&mut names);
        assert!(names.starts_with("chatml, llama3, gemma,"), "{names}");
    }

    #[test]
    fn detects_templates_by_their_markers() {
        let cases: &[(&str, &str)] = &[
            ("{{'<|im_start|>' + message['role'] + '\n'}}", "chatml"),
            (
                "{{'<|im_start|>'}}{%- if enable_thinking is defined %}{{- '<think>\n\n</think>\n\n' }}",
                "qwen3",
            ),
            ("{{'<|im_start|>' + role + '<|im_sep|>'}}", "phi4"),
            ("<|im_start|>{{ 'User: ' }}<end_of_utterance>", "smolvlm"),
            (
                "{{ '<|start_header_id|>' + role + '<|end_header_id|>' }}",
                "llama3",
            ),
            ("{{ '<start_of_turn>user' }}", "gemma"),
            ("{{ '[INST] ' + content + ' [/INST]' }}", "llama2"),
            ("[INST] <<SYS>>", "llama2-sys"),
            ("{{ bos_token + '[INST] ' + '<<SYS>>' }}", "llama2-sys-bos"),
            ("[INST] {{ content.strip() }}", "llama2-sys-strip"),
            ("{{ ' [INST] ' + system_message }}", "mistral-v1"),
            ("[AVAILABLE_TOOLS]{{ '[INST] ' }}", "mistral-v3"),
            ("[AVAILABLE_TOOLS]{{ \"[INST]\" }}", "mistral-v3-tekken"),
            ("[SYSTEM_PROMPT]{{ '[INST]' }}", "mistral-v7"),
            ("mistral-ish program", "llama2"), // as llama.cpp: no further marker
            ("<|user|>\n{{ c }}<|end|>\n<|assistant|>\n", "phi3"),
            ("<|user|>{{ c }}<|assistant|></s>", "falcon3"),
            ("<|user|>\n{{ c }}<|endoftext|>", "zephyr"),
            ("USER: {{ c }} ASSISTANT: ", "vicuna"),
            (
                "<｜User｜><｜Assistant｜><｜end▁of▁sentence｜>",
                "deepseek3",
            ),
            ("<|start_of_role|>", "granite"),
            ("<|START_OF_TURN_TOKEN|><|USER_TOKEN|>", "command-r"),
            ("[|system|][|assistant|][|endofturn|]", "exaone3"),
            ("<|header_start|><|header_end|>", "llama4"),
            (
                "<｜hy_Assistant｜><｜hy_place▁holder▁no▁3｜>",
                "hunyuan-dense",
            ),
            ("llama3", "llama3"),
        ];
        for &(src, name) in cases {
            let (t, w) = Template::detect(Some(src));
            assert_eq!((t.name(), w), (name, None), "{src}");
        }
        // Known to llama.cpp, not rendered here; or unknown; or absent: ChatML and a warning.
        for (src, says) in [
            (Some("[gMASK]<sop><|user|>"), "chatglm4"),
            (Some("USER: x ASSISTANT: SYSTEM: "), "vicuna-orca"),
            (Some("{{ messages }}"), "unrecognised"),
            (None, "no tokenizer.chat_template"),
        ] {
            let (t, w) = Template::detect(src);
            assert_eq!(t, Template::CHATML);
            assert!(w.as_deref().unwrap().contains(says), "{w:?}");
        }
    }

    #[test]
    fn reads_a_request() {
        let req = Request::parse(
            br#"{"add_assistant": true, "x": [1, {}], "messages": [{"role": "system", "content": "a\nb"}, {"content": "\u00e9", "role": "user"}]}"#,
        )
        .unwrap();
        assert!(req.add_assistant && !req.think);
        assert_eq!(req.messages.len(), 2);
        assert_eq!(req.messages[0].text, "a\nb");
        assert_eq!(
            (req.messages[1].role, req.messages[1].text.as_str()),
            (Role::User, "é")
        );
        for bad in [
            &br#"{"messages": [{"role": "tool", "content": ""}]}"#[..],
            br#"{"messages": [{"role": "user"}]}"#,
            br#"{"messages": [{"role": "user", "content": 3}]}"#,
            br#"{"add_assistant": 1}"#,
            br#"[]"#,
            b"{",
        ] {
            assert!(
                Request::parse(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// abi/wasmind.h lists the ids in table order.
    #[test]
    fn the_header_lists_the_ids() {
        let h =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/abi/wasmind.h")).unwrap();
        let mut listed = String::new();
        for (i, t) in Template::all().enumerate() {
            let _ = write!(
                listed,
                "{}{} {}",
                if i > 0 { ", " } else { "" },
                t.id(),
                t.name()
            );
        }
        let flat: String = h
            .lines()
            .map(|l| l.trim_start_matches([' ', '*']).trim_end())
            .collect::<Vec<_>>()
            .join(" ");
        assert!(flat.contains(&listed), "wasmind.h should list: {listed}");
    }
}
