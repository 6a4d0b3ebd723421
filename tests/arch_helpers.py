"""Tiny random models of further architectures (Gemma family, Llama), saved in Hugging Face layout."""

import torch
from helpers import word_tokenizer

# architecture -> (config class, model class) names in transformers, and config overrides
ARCHS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {"head_dim": 16}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {"head_dim": 16, "final_logit_softcapping": 0.2,
                                                     "attn_logit_softcapping": 5.0, "sliding_window": 4,
                                                     "query_pre_attn_scalar": 16}),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", {"head_dim": 16, "final_logit_softcapping": 0.2,
                                                         "sliding_window": 4, "query_pre_attn_scalar": 16}),
}


def tiny_arch(kind: str, vocab_size: int, seed: int = 0, n_kv: int = 2):
    import transformers

    cfg_cls, model_cls, extra = ARCHS[kind]
    torch.manual_seed(seed)
    cfg = getattr(transformers, cfg_cls)(vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
                                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=n_kv,
                                         max_position_embeddings=128, **extra)
    model = getattr(transformers, model_cls)(cfg).eval()
    with torch.no_grad():  # random init leaves some Gemma norms at zero weight: give every weight a spread
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(0.0, 0.3)
    return model


def save_tiny_arch(kind: str, path, seed: int = 0):
    tok = word_tokenizer()
    tiny_arch(kind, len(tok), seed).save_pretrained(path)
    tok.save_pretrained(path)
    return path
