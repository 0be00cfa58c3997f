"""Several choices in one request (`n`), as OpenAI and llama-server answer them.

Each choice is a whole reply of its own, decoded after the one before on the one engine thread
(`app.reply`); this module says what differs between them and puts their answers together.
Choices must differ when sampling: a request's seed (or the server's `--seed`) would otherwise
give every choice the same text, so choice i is seeded `seed + i` (choice 0 is what `n` = 1
gives). With no seed each reply draws its own. At T = 0 every choice is the target's greedy
reply, as OpenAI's are.
"""

from __future__ import annotations

from typing import Any, TypeVar

from spectui import limits
from spectui.serve.schema import Sampling

Body = TypeVar("Body", bound=Sampling)


def bodies(body: Body, server_seed: int | None) -> list[Body]:
    """One request body per choice, each with its own seed where the request is seeded."""
    seed = body.seed if body.seed is not None and body.seed >= 0 else server_seed
    count = body.n or 1
    if seed is None:
        return [body] * count
    return [body.model_copy(update={"seed": (seed + i) % (limits.MAX_SEED + 1), "n": 1}) for i in range(count)]


def merged(answers: list[dict[str, Any]]) -> dict[str, Any]:
    """The choices' whole responses as one: their choices indexed in order, usage summed over the
    completions (the prompt counted once, as OpenAI counts it), the first one's timings."""
    first = dict(answers[0])
    first["choices"] = [{**answer["choices"][0], "index": i} for i, answer in enumerate(answers)]
    completion = sum(answer["usage"]["completion_tokens"] for answer in answers)
    prompt = first["usage"]["prompt_tokens"]
    reasoning = sum(answer["usage"]["completion_tokens_details"]["reasoning_tokens"] for answer in answers)
    first["usage"] = {**first["usage"], "completion_tokens": completion, "total_tokens": prompt + completion,
                      "completion_tokens_details": {"reasoning_tokens": reasoning}}
    return first
