"""Several choices in one request (`n`), over HTTP against the tiny pair: each choice is a reply
of its own, seeded apart where the request is seeded, put together as OpenAI answers them."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from serving import Served, served_at_home

from spectui import limits

ASK = [{"role": "user", "content": "Tell me about gears."}]


@pytest.fixture(scope="module")
def server(tiny_pair, tmp_path_factory: pytest.TempPathFactory) -> Served:
    home = tmp_path_factory.mktemp("home")
    with served_at_home(home, tiny_pair.target, tiny_pair.draft) as running:
        yield running


def ok(server: Served, path: str, body: dict[str, Any]) -> Any:
    with server.http() as http:
        answer: httpx.Response = http.post(path, json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def refused(server: Served, body: dict[str, Any]) -> str:
    with server.http() as http:
        answer = http.post("/v1/chat/completions", json=body)
    assert answer.status_code == 400, answer.text
    return str(answer.json()["error"]["message"])


def test_each_choice_is_the_reply_its_own_seed_gives(server) -> None:
    # k = 0: with speculation a seed fixes the draws, but which draws a reply makes depends on
    # what K = auto drafts, which depends on the pass costs it has measured so far
    body = {"messages": ASK, "temperature": 1.0, "max_tokens": 24, "seed": 7, "k": 0}
    several = ok(server, "/v1/chat/completions", {**body, "n": 3})
    alone = [ok(server, "/v1/chat/completions", {**body, "seed": 7 + i}) for i in range(3)]
    assert [c["index"] for c in several["choices"]] == [0, 1, 2]
    assert [c["message"] for c in several["choices"]] == [a["choices"][0]["message"] for a in alone]
    texts = {c["message"]["content"] for c in several["choices"]}
    assert len(texts) > 1  # seeded apart: not three copies of one sample
    completion = sum(a["usage"]["completion_tokens"] for a in alone)
    prompt = alone[0]["usage"]["prompt_tokens"]
    assert several["usage"]["prompt_tokens"] == prompt  # the prompt counted once
    usage = several["usage"]
    assert (usage["completion_tokens"], usage["total_tokens"]) == (completion, prompt + completion)


def test_greedy_choices_are_all_the_targets_reply_and_completions_take_n_too(server) -> None:
    greedy = {"temperature": 0, "max_tokens": 16}
    one = ok(server, "/v1/chat/completions", {"messages": ASK, **greedy})["choices"][0]["message"]
    two = ok(server, "/v1/chat/completions", {"messages": ASK, "n": 2, **greedy})["choices"]
    assert [c["message"] for c in two] == [one, one]
    texts = ok(server, "/v1/completions", {"prompt": "Gears are", "n": 2, **greedy})["choices"]
    assert [c["index"] for c in texts] == [0, 1] and texts[0]["text"] == texts[1]["text"] != ""


@pytest.mark.parametrize(("extra", "words"), [
    ({"n": 0}, f"ask for 1 to {limits.MAX_CHOICES} choices"),
    ({"n": limits.MAX_CHOICES + 1}, "MAX_CHOICES"),
    ({"n": 2, "stream": True}, "is answered whole"),
    ({"n": 2, "return_tokens": True}, "return_tokens takes one choice"),
])
def test_what_n_cannot_ask_is_a_clear_400(server, extra, words) -> None:
    assert words in refused(server, {"messages": ASK, "max_tokens": 4, **extra})
