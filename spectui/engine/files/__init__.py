"""Facts from a GGUF before any load: its header and a diagnosis when llama.cpp refuses it
(`gguf_file`), the architectures' rules (`archs`, `recurrent`), whether a draft's tokenizer or a
head's shape fits a target (`compat`, `heads`). No llama.cpp import: the catalog and the memory plan
use them before anything is loaded."""
