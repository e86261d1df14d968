"""Sampling (stage 2 of a round): llama.cpp and what it generates.

Owns the one llama.cpp model and context with its tokenizer and chat template (``llm``), batched
generation of a round's groups with shared prompt cells (``rollout``), and the LoRA adapter written
as a llama.cpp GGUF and hot-swapped into the running model (``adapter``). Stands on ``tasks``.
"""
