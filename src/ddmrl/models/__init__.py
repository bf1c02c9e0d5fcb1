"""Models: the embedded TinyDDM, its tokenizer, and loading/saving policies and references."""

from ddmrl.models.tiny import TinyDDMConfig, TinyDDMForMaskedLM, new_tiny_model
from ddmrl.models.tokenizer import build_tokenizer, decode_completion, encode

__all__ = ["TinyDDMConfig", "TinyDDMForMaskedLM", "new_tiny_model", "build_tokenizer", "decode_completion", "encode"]
