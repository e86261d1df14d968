"""Learning (stage 4 of a round): GRPO on a LoRA, in torch.

Owns the pure algorithm (``grpo``: advantages, groups -> training sequences, the PPO-clip loss),
per-token weights for off-policy tokens (``offpolicy``), the torch model (``policy``: dequantized
GGUF + peft LoRA), the update (``trainer``), the packed shared-prefix batch layout (``packing``)
and its activation-memory estimate (``memory``), and atomic checkpoints (``checkpoint``).
Stands on ``tasks`` and ``models``.
"""
