"""`spectui serve`: the lossless speculative engine behind an OpenAI-compatible HTTP API.

schema (request bodies) -> convert (to the reply core's ReplyRequest, on the engine thread) ->
slot (one reply at a time, a bounded queue, the engine thread) -> app (Starlette routes) ->
streams (a reply as one JSON or as SSE) -> responses (OpenAI shapes, usage, timings, errors);
metrics (Prometheus); command (`spectui serve`), draining (its Ctrl+C).
"""
