"""The tokenizers of the models tackroom runs out of the box (the local engine is the tackroom-engine package)."""

from tackroom.model.tokenizers import (
    KNOWN_TOKENIZERS,
    TokenizerFetchError,
    TokenizerProvenance,
    load_tokenizer,
    qwen3_tokenizer_dir,
    smollm2_gguf,
    smollm2_tokenizer_dir,
    tokenizer_dir,
)

__all__ = [
    "KNOWN_TOKENIZERS",
    "TokenizerFetchError",
    "TokenizerProvenance",
    "load_tokenizer",
    "qwen3_tokenizer_dir",
    "smollm2_gguf",
    "smollm2_tokenizer_dir",
    "tokenizer_dir",
]
