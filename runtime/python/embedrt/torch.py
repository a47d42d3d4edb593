"""Feeding a transformers model its ``inputs_embeds`` from embedrt.

    import embedrt, embedrt.torch
    table = embedrt.Model("llama.embt")     # embedrt.convert("path/to/llama-folder", "llama.embt")
    logits = hf_model(inputs_embeds=embedrt.torch.inputs_embeds(table, input_ids)).logits

transformers' ``inputs_embeds`` is what the model's input embedding module returns: the token row
alone for most families (Llama, Mistral, Qwen, Phi, GPT-J, GPT-NeoX, Falcon, MPT, T5), the row
times ``sqrt(hidden)`` for Gemma (transformers 5 scales inside ``embed_tokens``). For those, embedrt
computes the same bits. Families whose model adds positions, token types or a LayerNorm after
``inputs_embeds`` (GPT-2, OPT, BERT, RoBERTa, BLOOM, BART, ...) are refused: embedrt's output
already holds those, and the model would apply them a second time.
runtime/python/examples/transformers_inputs_embeds.py shows the whole path, logits bit for bit.
"""
import sys
import weakref
from typing import Any, Optional

import torch

from ._errors import InvalidArgumentError, UnsupportedError

__all__ = ["inputs_embeds", "check_inputs_embeds"]

_TORCH_DTYPE = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
# Families whose transformers embedding module multiplies the row by the stored token.scale
# (transformers 5; 4.x Gemma scaled in the model's forward, after inputs_embeds).
_SCALED_INSIDE_EMBEDDING = {"gemma"}
_checked = weakref.WeakKeyDictionary()  # Model -> None (fits) or the reason it does not


def _reason_not_inputs_embeds(model) -> Optional[str]:
    metadata = model.metadata
    family = metadata.get("model.family", "custom")
    extra_tables = sorted(t["role"] for t in model.tables if t["role"] not in ("token", "other"))
    if extra_tables:
        return (f"'{model.path}' ({family}) adds {', '.join(extra_tables)} table(s) to the token row; transformers' "
                f"inputs_embeds is the token row alone, so the model would add them a second time. Use model.embed() "
                f"for the first layer's input instead")
    if metadata.get("output.scale", 1.0) != 1.0:
        return f"'{model.path}' ({family}) scales its output; transformers' inputs_embeds is the token row alone"
    if metadata.get("token.scale", 1.0) != 1.0:
        if family not in _SCALED_INSIDE_EMBEDDING:
            return (f"'{model.path}' ({family}) scales the token row; only Gemma's embedding module does that in "
                    f"transformers, so the model would see a different inputs_embeds")
        transformers = sys.modules.get("transformers")
        if transformers is not None and int(transformers.__version__.split(".")[0]) < 5:
            return (f"'{model.path}' (gemma): transformers {transformers.__version__} scales inputs_embeds in the model's "
                    f"forward, after the embedding module; embedrt's rows are already scaled (transformers 5 does it "
                    f"inside embed_tokens)")
    return None


def check_inputs_embeds(model) -> None:
    """Raises embedrt.UnsupportedError when ``model``'s output is not what transformers calls
    ``inputs_embeds`` for its family (see the module's docstring); the answer is kept per model."""
    try:
        reason = _checked[model]
    except KeyError:
        reason = _checked[model] = _reason_not_inputs_embeds(model)
    if reason is not None:
        raise UnsupportedError(reason)


def inputs_embeds(model, input_ids: Any, *, dtype: Optional[torch.dtype] = None, out: Optional[torch.Tensor] = None,
                  threads: Optional[int] = None) -> torch.Tensor:
    """The ``inputs_embeds`` a transformers model computes from ``input_ids``, from embedrt.

    Args:
      model: an embedrt.Model converted from the transformers model's checkpoint.
      input_ids: token ids, [B, L] or [L] (a torch tensor, a numpy array or a list).
      dtype: the torch dtype of the result; default the model's natural dtype (torch.bfloat16 for
        a bf16 checkpoint, as transformers computes it).
      out: a torch tensor of shape [B, L, dim] to write into (returned).
      threads: as for Model.embed.

    Returns a torch tensor [B, L, dim] (or [L, dim]) on the CPU.
    """
    check_inputs_embeds(model)
    if out is not None:
        return model.embed(input_ids, out=out, dtype=dtype, threads=threads)
    if dtype is None:
        dtype = _TORCH_DTYPE[model.outputs[0].dtype]
    elif not isinstance(dtype, torch.dtype):
        error = InvalidArgumentError(f"dtype: expected a torch dtype, got {dtype!r}")
        error.field = "dtype"
        raise error
    return model.embed(input_ids, dtype=dtype, threads=threads)
