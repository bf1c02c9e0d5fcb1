"""Models: the embedded TinyDDM, its tokenizer, and loading/saving policies and references."""

from ddmrl.models.tiny import TinyDDMConfig, TinyDDMForMaskedLM
from ddmrl.models.tokenizer import build_tokenizer, decode_completion, encode

__all__ = ["TinyDDMConfig", "TinyDDMForMaskedLM", "build_tokenizer", "decode_completion", "encode"]
