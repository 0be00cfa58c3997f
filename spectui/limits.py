"""Bounds shared by the engine, the CLI, the catalog and the UI: one definition each.

The CLI checks every option against these where it parses it (`spectui.argtypes`). Where a bound
comes from llama.cpp, its comment names the source line (llama.cpp as vendored in
llama-cpp-python 0.3.36).
"""

MAX_DRAFT = 16
"""The most tokens one speculative cycle may propose (K's upper bound; `auto` stays within it)."""

MAX_LOOKUP_DRAFT = 31
"""The most tokens a lookup (`ngram`, `suffix`) may propose in one cycle at K = auto: a verify
pass of 32 rows, as many as the target keeps logits for (`engine.llama.buffers.MAX_LOGIT_ROWS`). A
lookup costs no forward pass and its gate weighs each proposal against the measured cost of its
verify rows, so it may go past MAX_DRAFT; a drafter that runs a network pays a pass per token
and stays within MAX_DRAFT. On the demo pair a repeated 24-token line then takes one lookup
cycle instead of two (docs/BENCHMARKS.md, issue #13)."""

MAX_TREE_LEAVES = 16
"""The most leaves (branches) a token tree may have: llama.cpp sequences in the target's context
(`llama_context_params.n_seq_max`, one per root-to-leaf path, engine/model/tree_cache.py). A tree's
nodes are bounded by the rows the target keeps logits for (MAX_LOOKUP_DRAFT + 1, with `last`)."""

CTX_STEP = 256
"""llama.cpp pads every context up to a multiple of 256 tokens (`GGML_PAD(cparams.n_ctx, 256)`,
src/llama-context.cpp:290), so `--ctx` must be one: any other value would silently change."""

MIN_CTX = CTX_STEP
"""The smallest context llama.cpp makes (a `--ctx 16` would become 256 without a word)."""

MAX_CTX = 1 << 24
"""16,777,216 tokens: above any model's trained context; llama.cpp keeps n_ctx in a uint32 and
a larger value would wrap around when handed to it."""

MAX_REPLY_TOKENS = MAX_CTX
"""`--max-tokens`: a reply can never be longer than the largest context."""

MAX_THREADS = 512
"""`GGML_MAX_N_THREADS` (ggml/include/ggml.h:225)."""

MAX_GPU_LAYERS = 9999
"""`--n-gpu-layers`: -1 offloads all (llama.cpp reads any negative as all, src/llama-model.cpp:2004,
so -7 would silently mean all); 0..9999 offloads that many (more than the model has means all)."""

MAX_SEED = 2**32 - 1
"""Seeds are 32-bit, as llama.cpp's (`uint32_t seed`); numpy's `default_rng` refuses negatives."""

MAX_TEMPERATURE = 100.0
"""Temperature 0 is greedy; 100 already makes every token nearly equally likely."""

MAX_REPEAT = 100
"""`spectui bench --repeat`: interleaved rounds; each round runs every K over every prompt."""

MAX_TOP_K = 1 << 20
"""top-k: 0 turns it off (every token stays); above any vocabulary (262k for Gemma 3), so any
larger value would mean the same as 0."""

MAX_PROBABILITY = 1.0
"""top-p and min-p are probabilities, 0..1: top-p 1 and min-p 0 turn them off."""

MAX_CHAT_ID = 2**63 - 1
"""A saved chat's id is an SQLite rowid: a signed 64-bit integer."""

MAX_PORT = 65535
"""TCP ports are 16-bit (`spectui serve --port`; 0 lets the system pick a free one)."""

MAX_WAITING = 1024
"""`spectui serve --max-waiting`: requests waiting for the model beyond the one it answers."""

MAX_DRAIN_SECONDS = 3600.0
"""`spectui serve --drain-seconds`: how long Ctrl+C lets replies under way finish."""

MAX_TOOLS = 128
"""`tools` in one chat request: each becomes part of the prompt and, for a required call, of its
grammar (agents send a few dozen at most)."""

MAX_TOOLS_BYTES = 256 * 1024
"""The request's `tools` as JSON: their schemas become grammar rules built on the engine thread."""

# ----- what one request may make `spectui serve` build or hold (spectui/serve/bounds.py) ----------
# Each is checked before the work starts and named in the 400 that refuses a request past it.

MAX_JSON_DEPTH = 64
"""Arrays and objects nested in a request body: a JSON schema a model can follow nests far less;
the schema converter and pydantic recurse once per level."""

MAX_JSON_CONTAINERS = 1 << 17
"""Arrays and objects in one request body (each becomes a Python object, most a pydantic one)."""

MAX_MESSAGES = 1 << 14
"""Messages in one chat request (each is rendered by the chat template before the prompt is
known to fit)."""

MAX_PROMPT_CHARS_PER_TOKEN = 64
"""A prompt (all the messages' text, or a completion's prompt) of more characters than this many
per token of the context is refused before it is tokenized: it cannot fit (a token is a few
characters; the longest runs of one character a vocabulary merges are shorter than this)."""

MAX_TOKEN_IDS = 1 << 17
"""Token ids one /detokenize may send: each is a call into llama.cpp on the engine thread,
between two cycles of a running reply (2.4 µs each, measured on the tiny test model on a busy
2-core host: at most about 0.3 s)."""

MAX_STOP_STRINGS = 16
"""Stop strings one request may give (OpenAI takes 4); each is looked for after every token."""

MAX_STOP_CHARS = 256
"""The longest stop string: the text that could start one is held back from the stream."""

MAX_CHOICES = 8
"""Choices (`n`) one request may ask for: each is a whole reply, decoded one after another."""

MAX_LOGIT_BIAS = 1024
"""Entries in one request's `logit_bias` (each is added to every row of logits sampled)."""

MAX_LOGIT_BIAS_TEXT = 256
"""The longest text a `logit_bias` entry may name (its tokens are biased)."""

MAX_SCHEMA_REPEAT = 1000
"""A JSON schema's minItems, maxItems, minLength, maxLength, minProperties, maxProperties, and
the counts in its patterns' {m,n}. The schema converter (llama-cpp-python's) writes n optional
items as groups nested n deep, two rules a level, and llama.cpp refuses a group holding over
2000 rules (`MAX_REPETITION_THRESHOLD`, src/llama-grammar.cpp:499): about 1000 is as far as
such a grammar parses."""

MAX_SCHEMA_PROPERTIES = 256
"""Properties of one object in a JSON schema (the converter's rule for its optional ones grows
with the square of their number)."""

MAX_SCHEMA_ENTRIES = 1024
"""Entries in one list of a JSON schema: enum, anyOf, oneOf, allOf, prefixItems, required."""

MAX_SCHEMA_PATTERN_CHARS = 1024
"""The longest regular expression (`pattern`) in a JSON schema."""

MAX_GRAMMAR_CHARS = 1 << 18
"""A GBNF grammar, given or made from a JSON schema: 262,144 characters."""

MAX_GRAMMAR_DEPTH = 2048
"""Groups nested in a grammar: llama.cpp's parser recurses twice per level on the C stack
(about 450 bytes a level, measured: engine/step/grammar_bounds.py)."""

MAX_GRAMMAR_RULES = 1 << 14
"""Rules in a grammar once parsed (named, groups, and those repetitions add): llama.cpp walks
chains of them recursively on the C stack (about 220 bytes a rule, measured: 3.6 MiB for these)."""

GRAMMAR_STACK_BYTES = 64 << 20
"""The stack llama.cpp parses a grammar on (a thread of its own, `grammar_bounds.on_parser_stack`):
18x what MAX_GRAMMAR_RULES chained need, 70x MAX_GRAMMAR_DEPTH; reserved, not filled."""

MAX_GRAMMAR_ELEMENTS = 1 << 21
"""Symbols in a grammar once its repetitions are expanded (8 bytes each in llama.cpp)."""

MAX_GRAMMAR_REPEAT = 2000
"""`S{m,n}` in a grammar: llama.cpp's bound (`MAX_REPETITION_THRESHOLD`); a larger n would
silently mean no bound there, so it is refused instead."""
