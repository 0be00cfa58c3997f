"""The llama.cpp boundary: ggml's backend and devices bound once (`backend`), what the build has
(`build_info`), llama.cpp's log (`llama_log`), a decode's buffers as numpy sees them (`buffers`),
and the clock around llama.cpp's calls (`hostcost`). The lowest layer of the engine: imports nothing
else of it."""
