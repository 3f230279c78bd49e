"""Arguments of the APIs wasmind stands in for that it does not implement: refused by name
rather than ignored, unless they cannot change the result."""


def refuse_unsupported(where, given, ignored=(), neutral=None):
    """Raises ValueError for each argument in `given` that wasmind does not implement, except
    those in `ignored` (any value: device placement, batching, download options) and those in
    `neutral` given their value that means "off" (or None)."""
    neutral = neutral or {}
    for k, v in given.items():
        if k in ignored:
            continue
        if k in neutral and (v is None or v == neutral[k]):
            continue
        raise ValueError(f'{where}: {k}={v!r} is not supported by wasmind')


# llama-cpp-python's sampling arguments wasmind does not have, with their "off" values.
SAMPLING_OFF = {'frequency_penalty': 0.0, 'presence_penalty': 0.0, 'typical_p': 1.0, 'tfs_z': 1.0,
                'mirostat_mode': 0, 'logit_bias': None, 'logits_processor': None,
                'stopping_criteria': None, 'logprobs': False, 'top_logprobs': None, 'tools': None,
                'tool_choice': None, 'functions': None, 'function_call': None}
# Only read with mirostat on, which is refused.
SAMPLING_IGNORED = ('mirostat_tau', 'mirostat_eta')
