"""One loaded model and its rollback: `LlamaModel` (`llama_model`) with its vocabulary (`vocab`), how it
is opened (`loading`, `loaded_file`), how its context goes back (`rewind`, `checkpoints`) and holds a
token tree (`tree_cache`); `file_checks` loads two vocabularies to compare them."""
