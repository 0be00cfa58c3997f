"""The speculative step: what it asks of a target (`target`) and of a drafter (`drafter`, with
K = auto's per-token plan, `draftplan`), from logits to a distribution (`sampling`, `grammar`,
`grammar_bounds`), and the rule itself for a chain (`speculative`) and a tree (`tree`)."""
