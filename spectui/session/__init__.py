"""What a chat or a bench run needs above the engine, with no UI: options, memory plan, baseline,
and the loaded models."""
