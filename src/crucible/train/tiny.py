"""The tiny local model `train smoke` runs: random weights (a small Qwen2 from its config)
and a byte-level BPE tokenizer trained on the spot on the dataset's text. Nothing is
downloaded; it learns nothing useful, but every part of a run (dataset, chat template,
generation, the reward, the records) is exercised as on a real model."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
# ChatML, as Qwen's: the prompt's messages, then the assistant's turn opened.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
VOCAB = 384  # byte-level: 256 bytes, the special tokens, then what the text's merges earn


def tiny_tokenizer(texts: Iterable[str], *, vocab_size: int = VOCAB) -> Any:
    """A PreTrainedTokenizerFast trained on `texts` (byte-level BPE, ChatML specials)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    tok.train_from_iterator(list(texts) or [" "], trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|pad|>",
        bos_token=None, unk_token=None,
    )  # fmt: skip
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_model(tokenizer: Any, *, seed: int = 0) -> Any:
    """A two-layer Qwen2 with random weights sized for `tokenizer`."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None, tie_word_embeddings=True,
    )  # fmt: skip
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model
