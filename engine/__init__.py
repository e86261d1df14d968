"""One SAPO Swarm node: draws questions, samples rollouts with llama.cpp, scores, shares, trains a LoRA. No Qt here."""
