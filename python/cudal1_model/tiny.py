"""A tiny random causal language model with a chat template, for tests and smoke runs.

    python -m cudal1_model.tiny DIR [--hidden 32] [--layers 2] [--seed 0] [--kv-heads 4]

writes a Hugging Face checkpoint directory (Llama architecture, random weights) with a byte-level
BPE tokenizer trained on a few sentences of PyTorch-like text, and a chat template whose turns end
with ``<|end|>``, the end-of-sequence token. Nothing is downloaded.
"""

import argparse
import os

CORPUS = [
    "import torch",
    "import torch.nn as nn",
    "class ModelNew(nn.Module):",
    "    def forward(self, x):",
    "        return x * 2",
    "        return torch.relu(x)",
    "def get_inputs(): return [torch.randn(4, 8)]",
    "```python\nclass ModelNew(nn.Module): pass\n```",
    "The answer is yes. The answer is no.",
]
SPECIAL = ["<|pad|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def make_tokenizer(vocab: int = 400):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|end|>", bos_token=None)
    fast.chat_template = TEMPLATE
    return fast


def make(directory: str, hidden: int = 32, layers: int = 2, seed: int = 0, kv_heads: int = 4) -> str:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = make_tokenizer()
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        max_position_embeddings=1024,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    os.makedirs(directory, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m cudal1_model.tiny", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir")
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kv-heads", type=int, default=4, help="key/value heads (of 4 attention heads)")
    a = p.parse_args(argv)
    print(make(a.dir, a.hidden, a.layers, a.seed, a.kv_heads))


if __name__ == "__main__":
    main()
