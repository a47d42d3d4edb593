"""Replays the committed EmbeddingBag cases with whatever torch this Python has and counts the outputs
whose bits agree with the recorded ones (made with torch 2.x), by dtype and path. README.md reports
the run with Debian's torch 1.13:

    /usr/bin/python3 tests/bags/compare_torch.py
"""
import json
import os
import sys
from collections import Counter

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "embedding_bag")
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def main():
    manifest = json.load(open(os.path.join(ROOT, "manifest.json")))
    tables = {t["name"]: torch.load(os.path.join(ROOT, t["state_dict"]))["weight"] for t in manifest["tables"]}
    same, differ, refused = Counter(), Counter(), Counter()
    for c in manifest["cases"]:
        key = (c["output_dtype"], c["path"])
        table = tables[c["table"]]
        itype = torch.int32 if c["index_dtype"] == "int32" else torch.int64
        weights = None if c["per_sample_weights"] is None else torch.tensor(c["per_sample_weights"], dtype=table.dtype)
        try:
            bag = torch.nn.EmbeddingBag(table.shape[0], table.shape[1], mode=c["mode"],
                                        include_last_offset=c["include_last_offset"], padding_idx=c["padding_idx"],
                                        dtype=table.dtype)
            bag.load_state_dict({"weight": table})
            with torch.no_grad():
                out = bag(torch.tensor(c["indices"], dtype=itype), torch.tensor(c["offsets"], dtype=itype),
                          per_sample_weights=weights).contiguous()
        except RuntimeError as e:
            refused[key] += 1
            reason = str(e).splitlines()[0]
            continue
        bits = out.view(torch.int32 if out.dtype == torch.float32 else torch.int16).numpy().tobytes().hex()
        (same if bits == c["output_hex"] else differ)[key] += 1
    print("torch", torch.__version__)
    for key in sorted(set(same) | set(differ) | set(refused)):
        print(f"{key[0]:>4} {key[1]:>6}: {same[key]} identical, {differ[key]} differ, {refused[key]} refused")
    if refused:
        print("refused with:", reason)
    sys.exit(0)


if __name__ == "__main__":
    main()
