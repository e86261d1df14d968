"""Drawing questions (stage 1 of a round), and everything that says what a right answer is.

Owns reasoning-gym task mixes and presets, ``TaskSpec`` regeneration, each node's never-repeating
question stream and its held-out set, prompts and worked examples (``questions``,
``worked_examples``), task levels from reasoning-gym's curricula (``frontier``) and the size caps on
task settings (``caps``), the pure reward functions and the answer tag (``rewards``), the plain data of
a round's groups (``groups``), and the one string-hash seed every question-making process uses
(``hashseed``). Imports nothing else of the engine's but ``engine.errors``.
"""
