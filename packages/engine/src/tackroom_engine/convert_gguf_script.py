"""Convert a GGUF checkpoint to a bf16 Hugging Face folder. Runs inside the engine venv (torch present).

Usage: python convert_gguf_script.py GGUF_FILE OUT_DIR
Standalone on purpose: the engine venv (Python 3.11, vLLM) does not have tackroom installed.
"""

import os
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def read_once() -> None:
    """Parse the GGUF once, and gguf's tensor-name table once, instead of over and over.

    transformers opens the file three times (config, tokenizer, weights), each time parsing its 49k-entry
    vocabulary again, and builds the tensor-name table once per module (~400 times): together about two thirds
    of the conversion's CPU time. Both are lookups in read-only data (the reader is a read-only memmap), so one
    of each serves every call and the folder written is byte for byte the same. transformers imports both names
    from ``gguf`` when it calls them, so replacing them on the module is enough.
    """
    import functools

    import gguf

    readers: dict[tuple[str, str], object] = {}
    parse = gguf.GGUFReader

    def reader(path, mode="r"):
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = parse(path, mode)
        return readers[key]

    gguf.GGUFReader = reader
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(gguf.get_tensor_name_map)


def main() -> None:
    gguf_file, out = sys.argv[1], sys.argv[2]
    read_once()
    folder, name = os.path.split(gguf_file)
    t0 = time.time()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.bfloat16).to(torch.bfloat16)
    # The weights are dequantised now; a leftover quantizer/config would make loaders expect GGUF tensors.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = out + ".partial"
    os.makedirs(tmp, exist_ok=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp, save_jinja_files=False)
    os.replace(tmp, out)
    print(f"converted {name} -> {out} in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
