"""Which model, on which hardware: everything before a model is loaded.

Owns the model catalog and its memory needs (``catalog``), hardware detection and the stable
recommendation (``hardware``), hub downloads (``download``), GGUF inspection and validation
(``modelfile``), the working GGUF both llama.cpp and torch load (``working_copy``), the training
device, dtype and memory budget (``accel``). Stands on ``sampling.llm`` (llama.cpp's quantizer).
"""
