"""`GET /metrics`: what the server did, in Prometheus' text format (prometheus_client).

Each server has its own registry (tests start several in one process). Reply figures are counted
on the engine thread as each reply ends; requests as each is answered.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from spectui.session.figures import ReplyFigures

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
TPS_BUCKETS = (1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 1000)
ACCEPTANCE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("spectui_requests", "HTTP requests answered", ["route", "status"], registry=r)
        self.replies = Counter("spectui_replies", "Replies generated, by how they ended", ["reason"], registry=r)
        self.prompt_tokens = Counter("spectui_prompt_tokens", "Prompt tokens read (not reused from the cache)",
                                     registry=r)
        self.cached_tokens = Counter("spectui_prompt_cached_tokens", "Prompt tokens reused from the cache",
                                     registry=r)
        self.generated_tokens = Counter("spectui_generated_tokens", "Tokens generated", registry=r)
        self.drafted = Counter("spectui_drafted_tokens", "Tokens proposed, per drafter", ["drafter"], registry=r)
        self.accepted = Counter("spectui_accepted_tokens", "Proposed tokens the target accepted, per drafter",
                                ["drafter"], registry=r)
        self.acceptance = Histogram("spectui_reply_acceptance", "Accepted / drafted tokens of each reply that drafted",
                                    buckets=ACCEPTANCE_BUCKETS, registry=r)
        self.ttft = Histogram("spectui_time_to_first_token_seconds", "Prompt read and first token chosen",
                              buckets=TTFT_BUCKETS, registry=r)
        self.tps = Histogram("spectui_decode_tokens_per_second", "Decoding speed of each reply (after the first token)",
                             buckets=TPS_BUCKETS, registry=r)
        self.busy = Counter("spectui_requests_refused_busy", "Requests refused because the queue was full",
                            registry=r)
        self.waiting = Gauge("spectui_requests_waiting", "Requests waiting for the model", registry=r)
        self.running = Gauge("spectui_requests_running", "Replies being generated (0 or 1)", registry=r)

    def reply(self, figures: ReplyFigures) -> None:
        self.replies.labels(figures.reason).inc()
        self.prompt_tokens.inc(figures.prompt_decoded)
        self.cached_tokens.inc(figures.prompt_cached)
        self.generated_tokens.inc(figures.tokens)
        for source, totals in figures.by_drafter.items():
            self.drafted.labels(source).inc(totals.proposed)
            self.accepted.labels(source).inc(totals.accepted)
        if figures.acceptance is not None:
            self.acceptance.observe(figures.acceptance)
        if figures.prompt_seconds > 0:
            self.ttft.observe(figures.prompt_seconds)
        if figures.tps > 0:
            self.tps.observe(figures.tps)

    def text(self) -> bytes:
        return generate_latest(self.registry)
