"""One reply, from a typed request to typed figures: the path every front end takes.

The chat app (send, regenerate, edit, the side-by-side re-run), `spectui bench` and `spectui serve`
all describe what they want as a `ReplyRequest` and read what happened as `ReplyEvent`s:

    request = ReplyRequest(messages=(ChatMessage("user", "Hi"),), sampling=SamplingConfig(0.8),
                           max_tokens=256, draft=DraftControl(AUTO))
    for event in run_reply(generator, chat_format, request, cancelled=lambda: False):
        ReplyOpened(prompt_tokens, cached_tokens, n_ctx)   # the prompt is made: text follows
        ReplyPrompted(prompt_tokens, cached_tokens, seconds)   # the prompt is read
        ReplyPiece(text, origin, thinking)             # answer or reasoning, never a marker
        ReplyLogprobs(entries)                         # when request.logprobs is set
        Progress(cycle, totals)                        # the engine's running figures, per cycle
        ReplyDone(figures, text, reasoning, tokens, stats, message, sampling, raw_text)   # last

Here, and only here, a request becomes prompt tokens (the model's chat template, or raw text, or
token ids), stop strings, and the engine's `GenerationConfig`; reasoning is cut from the answer as
it streams (`chat.reasoning`), and the end becomes `ReplyFigures`. It is blocking and holds no lock:
run it on a worker thread, with the generator's lock held (`EngineSession.reply` does both), never
on an event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spectui.chat.reasoning import Markers, ReasoningSplitter, count_tokens_through, split_text
from spectui.chat.template import ChatFormat, ChatMessage, PromptStyle, encode_prompt
from spectui.engine.events import FAULT_REASONS, TARGET, Finished, GenerationStats, Progress, TextPiece, TokenLogprobs
from spectui.engine.generation_config import AUTO, DraftControl, GenerationConfig, SamplingConfig
from spectui.errors import SpectuiError
from spectui.session.figures import ReplyFigures, describe_k, sampling_label

if TYPE_CHECKING:
    from spectui.engine.generator import Generator
    from spectui.engine.model.llama_model import LlamaModel

DEFAULT_MAX_TOKENS = 1024


def never() -> bool:
    return False


@dataclass(frozen=True)
class ReplyRequest:
    """What one reply should be: its prompt, sampling, limits and drafting."""

    messages: tuple[ChatMessage, ...] = ()
    """A conversation, rendered with the model's chat template (see `style`)."""
    prompt: str | tuple[int, ...] | None = None
    """Instead of `messages`: text the model continues as it is (BOS added where the model
    wants one, as llama-server does), or token ids."""
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    """Temperature, top-k/p, min-p, seed, logit bias, grammar: the target's and the draft's."""
    max_tokens: int = DEFAULT_MAX_TOKENS
    stop: tuple[str, ...] = ()
    """Strings that end the reply (held back from the stream until they cannot match); the chat
    format's own are added."""
    draft: DraftControl = field(default_factory=lambda: DraftControl(AUTO))
    """K and the drafter; live: the chat's keys change it while the reply runs."""
    style: PromptStyle | None = None
    """The chat's mode and thinking switch (None: the loaded model's mode, thinking on)."""
    logprobs: int | None = None
    """None: none; n: each token's log-probability under the target and its n best alternatives."""
    baseline_probe: int = 0
    """Decode this many tokens with speculation off first, timed apart (a fresh baseline)."""
    shown_tokens: frozenset[int] = frozenset()
    """Control tokens the reply writes as text (a tool call's markers; `GenerationConfig`)."""


# ----- events ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplyOpened:
    """The prompt is made; the reply's text follows (or, when it does not fit, a `ReplyDone`
    with reason `context` and no tokens)."""

    prompt_tokens: int
    cached_tokens: int
    """Prompt tokens an earlier reply left in the cache (reused, not read again)."""
    n_ctx: int
    """The context's size in tokens."""

    @property
    def fits(self) -> bool:
        """False when the prompt alone fills the context (nothing can be generated)."""
        return self.prompt_tokens < self.n_ctx


@dataclass(frozen=True)
class ReplyPrompted:
    """The prompt has been read (its part the cache did not hold, decoded) and the first token
    chosen: it comes with the generation's first event, before it."""

    prompt_tokens: int
    cached_tokens: int
    seconds: float
    """From the start of the generation until then."""


@dataclass(frozen=True)
class ReplyPiece:
    """Text of the reply, without reasoning markers."""

    text: str
    origin: str = TARGET
    """`target`, or the drafter whose proposal the target accepted (`model`, `suffix`, …)."""
    thinking: bool = False
    """True for the model's reasoning before its answer."""


@dataclass(frozen=True)
class TopLogprob:
    token: int
    text: str
    """The token's text (its bytes as UTF-8; an incomplete character is dropped)."""
    data: bytes
    logprob: float


@dataclass(frozen=True)
class LogprobEntry:
    """One token of the reply: its log-probability under the target and the best alternatives."""

    token: int
    text: str
    data: bytes
    logprob: float
    top: tuple[TopLogprob, ...] = ()


@dataclass(frozen=True)
class ReplyLogprobs:
    entries: tuple[LogprobEntry, ...]


@dataclass(frozen=True)
class ReplyDone:
    """The last event: what the reply said and its figures."""

    figures: ReplyFigures
    text: str
    """The answer (without the reasoning)."""
    reasoning: str
    tokens: tuple[int, ...]
    """Every token of the reply, reasoning included (the tokens of a stop string too)."""
    stats: GenerationStats
    """The engine's final totals (what the live panel showed, now complete)."""
    message: str = ""
    """For a reply cut by a full context or a lost worker: what happened and what to do."""
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    """How its tokens were chosen (the request's: the seed drawn for it included)."""
    raw_text: str = ""
    """Everything the reply wrote, reasoning and its markers included (what `tokens` spell,
    less a stop string)."""
    error: SpectuiError | None = None
    """For a reply a fault cut: the error that ended it (`spectui.faults` names it)."""

    @property
    def reason(self) -> str:
        return self.figures.reason

    @property
    def fault(self) -> bool:
        """The reply was cut by a fault, not ended by the model, a limit or the user."""
        return self.figures.reason in FAULT_REASONS


ReplyEvent = ReplyOpened | ReplyPrompted | ReplyPiece | ReplyLogprobs | Progress | ReplyDone


class BadPrompt(SpectuiError):
    """A request without a prompt, or with token ids the model does not have."""


# ----- the reply ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prepared:
    """A request made concrete for the loaded model."""

    tokens: list[int]
    config: GenerationConfig
    markers: Markers | None
    starts_in_reasoning: bool


def prepare(generator: Generator, chat_format: ChatFormat, request: ReplyRequest) -> Prepared:
    """Prompt tokens, stop strings and the engine's config; raises `BadPrompt`,
    `ChatTemplateError` or `GrammarError` (one-line `SpectuiError`s)."""
    target = generator.target
    stop = request.stop
    markers, opens = None, False
    tokens = prompt_of(chat_format, request, target)
    if request.prompt is None:
        style = request.style
        fmt = chat_format.switched(style.mode if style else "")
        markers, opens = fmt.markers, fmt.opens_reasoning(request.messages, style)
        stop = (*stop, *fmt.stop_strings)
    if not tokens:
        raise BadPrompt("the prompt is empty")
    if request.sampling.grammar:  # a grammar that does not parse is refused before the reply opens
        from spectui.engine.step.grammar import Grammar

        Grammar.compile(target, request.sampling.grammar, triggers=request.sampling.grammar_triggers).close()
    config = GenerationConfig(max_tokens=request.max_tokens, stop=stop, sampling=request.sampling,
                              logprobs=request.logprobs, baseline_probe=request.baseline_probe,
                              shown_tokens=request.shown_tokens)
    return Prepared(tokens, config, markers, opens)


def prompt_of(chat_format: ChatFormat, request: ReplyRequest, target: LlamaModel) -> list[int]:
    """The tokens the request's reply reads: its raw prompt's, or its conversation's."""
    if request.prompt is not None:
        return _prompt_tokens(target, request.prompt)
    if request.messages:
        return chat_prompt(chat_format, request, target)[1]
    raise BadPrompt("nothing to reply to: the request has neither messages nor a prompt")


def chat_prompt(chat_format: ChatFormat, request: ReplyRequest, target: LlamaModel) -> tuple[str, list[int]]:
    """A chat request's prompt: its text (`ChatFormat.prompt_text`, in the request's mode) and the
    tokens a reply reads (serve's /apply-template and input_tokens say these too)."""
    style = request.style
    text = chat_format.switched(style.mode if style else "").prompt_text(request.messages, style)
    return text, encode_prompt(target, text)


def _prompt_tokens(target: LlamaModel, prompt: str | tuple[int, ...]) -> list[int]:
    if isinstance(prompt, str):
        return encode_prompt(target, prompt)
    tokens = [int(t) for t in prompt]
    if any(not 0 <= t < target.n_vocab for t in tokens):
        raise BadPrompt(f"the prompt holds token ids outside the model's vocabulary (0..{target.n_vocab - 1})")
    return tokens


def run_reply(generator: Generator, chat_format: ChatFormat, request: ReplyRequest,
              cancelled: Callable[[], bool] = never) -> Iterator[ReplyEvent]:
    """Stream one reply (blocking: a worker thread, with the generator's lock held)."""
    prepared = prepare(generator, chat_format, request)
    target = generator.target
    opened = ReplyOpened(len(prepared.tokens), target.kept_on_sync(prepared.tokens), target.n_ctx)
    yield opened
    start, prompted = time.perf_counter(), False
    splitter = ReasoningSplitter(prepared.markers, "reasoning" if prepared.starts_in_reasoning else "answer")
    answer: list[str] = []
    reasoning: list[str] = []
    last_k: int | None = None
    drafters = generator.describe()
    for event in generator.generate(prepared.tokens, prepared.config, request.draft, cancelled):
        if not prompted:  # the generation says nothing before its prompt pass, but a prompt it refused
            prompted = True
            if not isinstance(event, Finished) or event.stats.prompt_seconds > 0:
                yield ReplyPrompted(opened.prompt_tokens, opened.cached_tokens, time.perf_counter() - start)
        if isinstance(event, TextPiece):
            for kind, text in splitter.feed(event.text):
                yield _piece(text, event.origin, kind == "reasoning", answer, reasoning)
        elif isinstance(event, TokenLogprobs):
            yield ReplyLogprobs(tuple(_entry(target, e.token, e.logprob, e.top) for e in event.entries))
        elif isinstance(event, Progress):
            last_k = event.cycle.k if not event.cycle.probe else last_k
            yield event
        elif isinstance(event, Finished):
            for kind, text in splitter.flush():
                yield _piece(text, TARGET, kind == "reasoning", answer, reasoning)
            control = request.draft
            speculating = control.effective_k() != 0 and drafters.can_speculate
            figures = ReplyFigures.of(
                event.stats, event.reason, k=describe_k(control, drafters, last_k),
                drafter=(control.drafter or drafters.default) if speculating else "",
                prompt_tokens=len(prepared.tokens), sampling=sampling_label(request.sampling),
                thinking_tokens=thinking_tokens(target, event, prepared.markers, prepared.starts_in_reasoning))
            yield ReplyDone(figures, "".join(answer), "".join(reasoning).strip(), event.tokens, event.stats,
                            event.message, request.sampling, event.text, event.error)


def _piece(text: str, origin: str, thinking: bool, answer: list[str], reasoning: list[str]) -> ReplyPiece:
    (reasoning if thinking else answer).append(text)
    return ReplyPiece(text, origin, thinking)


def _entry(target: LlamaModel, token: int, logprob: float, top: tuple[tuple[int, float], ...]) -> LogprobEntry:
    data = target.token_bytes(token)
    alternatives = tuple(TopLogprob(t, _text(b := target.token_bytes(t)), b, lp) for t, lp in top)
    return LogprobEntry(token, _text(data), data, logprob, alternatives)


def _text(data: bytes) -> str:
    """A token's bytes as text; a character the token only starts is left out (llama-server)."""
    return data.decode("utf-8", errors="ignore")


def thinking_tokens(target: LlamaModel, finished: Finished, markers: Markers | None, opens: bool) -> int:
    """How many of the reply's tokens were reasoning (its markers included)."""
    split = split_text(finished.text, markers, opens)
    if not split.reasoning_end:
        return 0
    return count_tokens_through((target.token_bytes(t) for t in finished.tokens), finished.text, split.reasoning_end)


def final(events: Iterator[ReplyEvent]) -> ReplyDone:
    """Run a reply to its end; its `ReplyDone` (bench, tests)."""
    done = None
    for event in events:
        if isinstance(event, ReplyDone):
            done = event
    if done is None:  # pragma: no cover - run_reply always ends with one
        raise RuntimeError("the reply ended without its figures")
    return done
