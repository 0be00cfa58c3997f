"""spectui: speculative decoding for llama.cpp GGUF models, in a terminal chat app."""

__version__ = "0.1.0"
