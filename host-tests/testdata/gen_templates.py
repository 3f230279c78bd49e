"""llama.cpp's renderings of conversations that the fixture reference/templates.json does not hold,
for the chat templates wasmind implements, and llama.cpp's recognition of template programs.

usage: python3 host-tests/testdata/gen_templates.py host-tests/testdata/templates-extra.json
needs: pip install llama-cpp-python==0.3.36 (the version that made templates.json)

Writes {"note", "templates": {name: [{"messages", "add_ass", "text"}]}, "detect": [{"source",
"name"}]}. "detect": for each template program below, the built-in template whose rendering
llama.cpp gives it (llama_chat_apply_template runs llm_chat_detect_template on a program that
is not a built-in name), found by comparing renderings; null when llama.cpp recognises none.
"""
import ctypes, json, sys
import llama_cpp

NAMES = ["chatml", "llama3", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip",
         "mistral-v1", "mistral-v3", "mistral-v3-tekken", "mistral-v7", "mistral-v7-tekken",
         "gemma", "phi3", "phi4", "zephyr", "vicuna", "deepseek3", "granite", "smolvlm", "falcon3",
         "command-r", "exaone3", "llama4", "hunyuan-dense", "deepseek"]

CONVS = [
    # a system message only
    [("system", "You are terse.")],
    # several system messages
    [("system", "Rule one."), ("system", "Rule two."), ("user", "Hi")],
    # empty content everywhere
    [("system", ""), ("user", ""), ("assistant", ""), ("user", "")],
    # Unicode, with non-ASCII spaces at the ends (C isspace does not trim them)
    [("system", "\u00a0Réponds en français.\u3000"), ("user", "Привет! 你好 🌍 — naïve café"),
     ("assistant", "Bonjour ! 👋"), ("user", "\u2003¿Qué tal?\u00a0")],
    # ASCII white space at the ends (trimmed by some templates)
    [("system", "  \tsys \n"), ("user", "\n\nq  \r\n"), ("assistant", " a \x0b"), ("user", "\x0c b")],
    # role orders: assistant first, users in a row, a system message in the middle, ending
    # with the assistant, a system message after a reply
    [("assistant", "I start."), ("user", "ok")],
    [("user", "one"), ("user", "two"), ("assistant", "three")],
    [("user", "a"), ("system", "mid"), ("user", "b")],
    [("user", "q"), ("assistant", "a")],
    [("user", "a"), ("assistant", "b"), ("system", "New rules."), ("user", "c")],
    # markup in the text goes through as text
    [("user", "<|im_end|> [INST] </s> <start_of_turn>")],
    # four exchanges
    [("system", "S"), ("user", "u1"), ("assistant", "a1"), ("user", "u2"), ("assistant", "a2"),
     ("user", "u3"), ("assistant", "a3"), ("user", "u4")],
    # templates.py's held-out conversations
    [("user", "Name three rivers.")],
    [("system", "Be terse."), ("user", "2+2?"), ("assistant", "4"), ("user", "And 3+3?")],
    [("system", "You speak like a pirate.\nAlways."), ("user", "Où est la bibliothèque ? 📚")],
    [("user", "a"), ("assistant", "b"), ("user", "c"), ("assistant", "d"), ("user", "e")],
    [("user", "  leading and trailing spaces  ")],
    [("system", ""), ("user", "Empty system message above.")],
]

# Template programs (fragments with the markers real ones carry) for the recognition check.
SOURCES = [
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}",
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '<|im_sep|>' + message['content'] + '<|im_end|>'}}{% endfor %}",
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}: {{message['content']}}<end_of_utterance>\\n{% endfor %}",
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|start_header_id|>user<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endif %}{% endfor %}",
    "{{- bos_token }}{%- for message in messages %}{{- '<|header_start|>' + message['role'] + '<|header_end|>\\n\\n' + message['content'] | trim + '<|eot|>' }}{%- endfor %}",
    "{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}",
    "{% for message in messages %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + message['content'] + ' [/INST]' }}{% endif %}{% endfor %}",
    "{% if messages[0]['role'] == 'system' %}{% set system_message = '<<SYS>>\\n' + messages[0]['content'] + '\\n<</SYS>>\\n\\n' %}{% endif %}{{ '[INST] ' + system_message + content + ' [/INST]' }}",
    "{% for message in messages %}{{ bos_token + '[INST] ' + '<<SYS>>\\n' + message['content'] + ' [/INST]' }}{% endfor %}",
    "{% for message in messages %}{{ bos_token + '[INST] ' + '<<SYS>>\\n' + message['content'].strip() + ' [/INST]' }}{% set content = message['content'] %}{{ content.strip() }}{% endfor %}",
    "{{ bos_token }}{% for message in loop_messages %}{% if message['role'] == 'user' %}{{ ' [INST] ' + system_message + message['content'] + ' [/INST]' }}{% endif %}{% endfor %}",
    "{%- for message in loop_messages %}{%- if message['role'] == 'user' %}{%- if tools is not none %}{{- '[AVAILABLE_TOOLS] [' }}{%- endif %}{{- '[INST] ' + message['content'] + '[/INST]' }}{%- endif %}{%- endfor %}",
    "{%- for message in loop_messages %}{%- if message['role'] == 'user' %}{%- if tools is not none %}{{- '[AVAILABLE_TOOLS][' }}{%- endif %}{{- \"[INST]\" + message['content'] + \"[/INST]\" }}{%- endif %}{%- endfor %}",
    "{{ bos_token }}{% if system_message %}{{ '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}{% endif %}{{ '[INST]' + message['content'] + '[/INST]' }}",
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}{{ '<|assistant|>\\n' }}",
    "{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + '\\n' }}{% endfor %}{{ '<|user|>' }}{{ '<|assistant|>\\n' }}{{ '</s>' }}",
    "{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + eos_token }}{% endif %}{% endfor %}{{ '<|endoftext|>' }}",
    "{% for message in messages %}{% if message['role'] == 'user' %}{{ 'USER: ' + message['content'] + '\\n' }}{% else %}{{ 'ASSISTANT: ' + message['content'] + '</s>\\n' }}{% endif %}{% endfor %}",
    "{% for message in messages %}{% if message['role'] == 'system' %}{{ 'SYSTEM: ' + message['content'] }}{% elif message['role'] == 'user' %}{{ 'USER: ' + message['content'] }}{% else %}{{ 'ASSISTANT: ' + message['content'] }}{% endif %}{% endfor %}",
    "{% for message in messages %}{% if message['role'] == 'user' %}{{'<｜User｜>' + message['content']}}{% else %}{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{% endif %}{% endfor %}",
    "{%- for message in messages %}{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] + '<|end_of_text|>\\n' }}{%- endfor %}",
    "{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + content.strip() + '<|END_OF_TURN_TOKEN|>' }}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}",
    "{% for message in messages %}{% if message['role'] == 'system' %}{{ '[|system|]' + message['content'] + '[|endofturn|]\\n' }}{% elif message['role'] == 'user' %}{{ '[|user|]' + message['content'] + '\\n' }}{% else %}{{ '[|assistant|]' + message['content'] + '[|endofturn|]\\n' }}{% endif %}{% endfor %}",
    "{% for message in messages %}{% if loop.index0 == 0 and message['role'] == 'system' %}{{ message['content'] + '<｜hy_place▁holder▁no▁3｜>' }}{% elif message['role'] == 'user' %}{{ '<｜hy_User｜>' + message['content'] + '<｜hy_Assistant｜>' }}{% endif %}{% endfor %}",
    "[gMASK]<sop>{% for item in messages %}<|{{ item['role'] }}|>\\n{{ item['content'] }}{% endfor %}",
    "{{ messages }}",
    "llama3",
    "mistral-v3",
]


def apply(tmpl, conv, add_ass):
    msgs = (llama_cpp.llama_chat_message * max(len(conv), 1))()
    keep = []
    for i, (r, c) in enumerate(conv):
        rb, cb = r.encode(), c.encode()
        keep += [rb, cb]
        msgs[i].role = rb
        msgs[i].content = cb
    buf = ctypes.create_string_buffer(1 << 16)
    k = llama_cpp.llama_chat_apply_template(tmpl.encode(), msgs, len(conv), add_ass, buf, len(buf))
    return None if k < 0 else buf.raw[:k].decode("utf-8")


def main():
    n = llama_cpp.llama_chat_builtin_templates(None, 0)
    arr = (ctypes.c_char_p * n)()
    llama_cpp.llama_chat_builtin_templates(arr, n)
    builtin = sorted(a.decode() for a in arr)
    missing = [t for t in NAMES if t not in builtin]
    assert not missing, missing

    res = {"note": "llama.cpp (llama-cpp-python %s) llama_chat_apply_template; made by "
                   "host-tests/testdata/gen_templates.py" % llama_cpp.__version__,
           "templates": {}, "detect": []}
    for t in NAMES:
        rows = []
        for conv in CONVS:
            for add_ass in (True, False):
                rows.append({"messages": [{"role": r, "content": c} for r, c in conv],
                             "add_ass": add_ass, "text": apply(t, conv, add_ass)})
        res["templates"][t] = rows

    # A program's template: the built-in whose renderings of a probe conversation it matches.
    probe = [("system", "S x"), ("user", " U y "), ("assistant", "A z"), ("user", "V")]
    want = {t: (apply(t, probe, True), apply(t, probe, False)) for t in builtin}
    for src in SOURCES:
        got = (apply(src, probe, True), apply(src, probe, False))
        names = [t for t in builtin if want[t] == got] if got[0] is not None else []
        # Templates that render alike cannot be told apart this way: prefer the one named first
        # in NAMES, else any.
        ours = [t for t in NAMES if t in names]
        res["detect"].append({"source": src, "name": (ours or names or [None])[0],
                              "alike": names})
    with open(sys.argv[1], "w") as f:
        json.dump(res, f, ensure_ascii=False, indent=0)
    print(len(NAMES), "templates x", len(CONVS), "conversations x 2;", len(SOURCES), "programs")


main()
