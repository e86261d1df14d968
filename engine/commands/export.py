"""``sapo-engine export``: a node's trained LoRA, ready to use outside SAPO Swarm.

Writes, from the data dir's newest checkpoint that verifies (a damaged one is passed over, and said):
  OUT/peft/      the adapter as peft saves it (adapter_config.json + adapter_model.safetensors)
  OUT/lora.gguf  the same adapter for llama.cpp
  OUT/README.md  how to use each
The base model is the node's working GGUF, named in the README.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from engine.learning.checkpoint import LORA_FILES, model_folder, model_stores
from engine.errors import SapoError


def export(data_dir: Path, out: Path, model: str | None = None) -> None:
    stores = model_stores(data_dir)  # newest first
    if not stores:
        raise SapoError(f"no checkpoint in {data_dir}: run some rounds first")
    name = next(iter(stores)) if model is None else model_folder(model)
    if name not in stores:
        raise SapoError(f"no checkpoint of model {model!r} in {data_dir}; it has: {', '.join(stores)}")
    if model is None and len(stores) > 1:
        print(f"{data_dir} holds checkpoints of {len(stores)} models; exporting the latest trained, {name} "
              f"(--model chooses)")
    store = stores[name]
    latest, passed = store.resume_point(set_aside=False)  # a node may be running here: nothing is moved
    for line in passed:
        print(line)
    if latest is None:
        raise SapoError(f"no checkpoint of {name} in {data_dir} verifies" if passed
                        else f"no checkpoint of {name} in {data_dir}: run some rounds first")
    state = store.load_state(latest)  # verifies every file
    model_path = Path(state.config.get("model_path") or "")
    if not model_path.is_file():
        raise SapoError(f"the base model of this checkpoint is gone ({model_path}); run the node once to rebuild it")
    try:
        (out / "peft").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SapoError(f"cannot write to {out}: {exc.strerror or exc}") from None
    for name in LORA_FILES:
        shutil.copy2(latest / name, out / "peft" / name)

    from engine.sampling.adapter import export_gguf_adapter
    from engine.models.modelfile import inspect_gguf
    from engine.learning.policy import attach_lora, load_base, lora_config

    info = inspect_gguf(model_path)
    cfg = json.loads((latest / "adapter_config.json").read_text())
    model = attach_lora(load_base(model_path), lora_config(cfg["r"], cfg["lora_alpha"], cfg.get("lora_dropout", 0.0),
                                                           sorted(cfg["target_modules"])))
    store.load_weights(latest, model, None)
    export_gguf_adapter(model, info.architecture, out / "lora.gguf", n_head=info.n_head, n_head_kv=info.n_head_kv)
    (out / "README.md").write_text(
        f"# LoRA from SAPO Swarm, {latest.name} ({state.model})\n\n"
        f"Base model: `{model_path.name}` (the node's working GGUF; transformers loads it with `gguf_file=`).\n\n"
        f"- llama.cpp: `llama-cli -m {model_path.name} --lora lora.gguf`\n"
        f"- peft: `PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(dir, gguf_file=\"{model_path.name}\"), \"peft\")`\n"
    )
    print(f"exported {latest.name} to {out}: peft/, lora.gguf, README.md")
