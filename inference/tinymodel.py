"""Build a tiny random Llama-style model that a CPU vLLM can serve, without any download.

It exists so the real engine can be exercised on a machine without GPUs or network: the weights
are random, but everything vLLM touches is real (a Hugging Face tokenizer with a Metaspace
pre-tokenizer and a chat template, a Llama config, safetensors weights). Like the Qwen family,
its output layer is padded past the tokenizer, so it samples ids the tokenizer has no piece
for: the input that crashes an unpatched vLLM when logprobs are requested.

Runs in the vLLM virtualenv (it needs torch, transformers and tokenizers):

    python -m inference.tinymodel OUT_DIR [--seed N]
"""

import argparse
import random
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

UNK, BOS, EOS = "<unk>", "<s>", "</s>"
# SentencePiece's space marker; vLLM only takes the crashing code path for Metaspace tokenizers.
SPACE_MARKER = "\u2581"
# Small, so that the padded tail is a sizeable share of the logits (64 of ~576, about 11 %) and a
# random model samples out-of-vocabulary ids within a few tokens.
TOKENIZER_VOCAB = 512
# Output rows with no tokenizer piece; Qwen2 pads 151,646 tokens to 151,936 logits.
VOCAB_PADDING = 64
# Enough made-up text for BPE to find TOKENIZER_VOCAB pieces; the exact shape does not matter.
CORPUS_WORDS = 600
CORPUS_SENTENCES = 4000
WORD_SYLLABLES = (1, 4)
SENTENCE_WORDS = (3, 14)
HIDDEN = 128
LAYERS = 2
# vLLM's CPU attention kernels support head sizes from 32 up.
HEAD_DIM = 32
# Long enough for multi-turn prompts in tests; the KV cache, not this, should bound a request.
MAX_POSITIONS = 4096
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<s>' + message['role'] + '\\n' + message['content'] + '</s>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<s>assistant\\n' }}{% endif %}"
)

SYLLABLE_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "")
SYLLABLE_VOWELS = ("a", "e", "i", "o", "u")
SENTENCE_ENDS = (".", "?", "!")


def make_corpus(rng: random.Random) -> list[str]:
    """Sentences of pronounceable made-up words: enough structure for BPE to learn merges."""
    words = [
        "".join(rng.choice(SYLLABLE_ONSETS) + rng.choice(SYLLABLE_VOWELS) for _ in range(n))
        for n in (rng.randint(*WORD_SYLLABLES) for _ in range(CORPUS_WORDS))
    ]
    return [
        " ".join(rng.choices(words, k=rng.randint(*SENTENCE_WORDS))).capitalize()
        + rng.choice(SENTENCE_ENDS)
        for _ in range(CORPUS_SENTENCES)
    ]


def train_tokenizer(corpus: list[str]) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement=SPACE_MARKER, prepend_scheme="always"
    )
    tokenizer.decoder = decoders.Metaspace(replacement=SPACE_MARKER, prepend_scheme="always")
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB, special_tokens=[UNK, BOS, EOS], show_progress=False
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token=UNK,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=EOS,
        chat_template=CHAT_TEMPLATE,
    )


def make_model(tokenizer: PreTrainedTokenizerFast, seed: int) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tokenizer) + VOCAB_PADDING,
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HIDDEN // HEAD_DIM,
        num_key_value_heads=HIDDEN // HEAD_DIM,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        dtype="bfloat16",
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).to(torch.bfloat16)


def build(out_dir: Path, seed: int) -> None:
    """Write tokenizer, config and weights to `out_dir`; the same seed gives the same files."""
    tokenizer = train_tokenizer(make_corpus(random.Random(seed)))
    model = make_model(tokenizer, seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out_dir)
    model.save_pretrained(out_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="new or empty directory to write the model to")
    parser.add_argument("--seed", type=int, default=0, help="seeds the corpus and the weights")
    args = parser.parse_args()
    if args.out_dir.exists() and (not args.out_dir.is_dir() or any(args.out_dir.iterdir())):
        parser.error(f"{args.out_dir} is not a new or empty directory")
    build(args.out_dir, args.seed)
    print(f"tiny model written to {args.out_dir}")


if __name__ == "__main__":
    main()
