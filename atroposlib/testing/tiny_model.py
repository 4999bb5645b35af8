"""Build a tiny Qwen2-architecture causal LM and a byte-level BPE tokenizer, locally and offline.

No model hub is needed: the tokenizer is trained with ``tokenizers`` on a small corpus generated here
(English phrases, arithmetic and chat-formatted text), and the model is a freshly initialised
``Qwen2ForCausalLM`` with a few hundred thousand to a few million parameters. The result is a normal
Hugging Face model directory (``config.json``, ``model.safetensors``, ``tokenizer.json``,
``tokenizer_config.json`` with a ChatML chat template) that ``transformers``, vLLM and the trainer load
like any hub model.

Builds are deterministic for a given :class:`TinyModelSpec` and cached under
``$ATROPOS_CACHE_DIR`` (default ``~/.cache/atroposlib``); building takes a few seconds.

Command line: ``python -m atroposlib.testing.tiny_model [--out DIR]`` prints the directory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from filelock import FileLock

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}"
    "{{ '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Reasoning and tool-call tags are single tokens but not special ones, as in Qwen's tokenizers: a reply
# decoded with ``skip_special_tokens=True`` (as chat completions are) keeps them.
TAG_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
BUILDER_VERSION = 2

_WORDS = (
    "the a an of to and in is it that for on with as was at by be this from or have not are which "
    "one two three four five six seven eight nine ten hundred thousand number numbers sum total answer "
    "question what how many much more less each every apples books pens students friends buys sells "
    "gives has had then left remaining times plus minus divided multiplied equals result compute "
    "solve step first second next finally therefore so because if when she he they we you I my our "
    "her his their day days week weeks hour hours minute minutes dollar dollars cost price money "
    "user assistant system tool reply think thinking reasoning correct wrong good bad yes no please "
    "calculate give only final write short long story about cat dog sun moon tree water fire"
).split()


@dataclass(frozen=True)
class TinyModelSpec:
    """Size and seed of the tiny model. Defaults give ~0.8 M parameters (2 layers, width 128)."""

    vocab_size: int = 1024
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 2
    max_position_embeddings: int = 2048
    seed: int = 0

    def key(self) -> str:
        blob = json.dumps({**asdict(self), "v": BUILDER_VERSION}, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


def default_cache_dir() -> Path:
    return Path(os.environ.get("ATROPOS_CACHE_DIR", Path.home() / ".cache" / "atroposlib"))


def _corpus(seed: int, n_lines: int = 6000) -> list[str]:
    rng = random.Random(seed)
    lines: list[str] = []
    for _ in range(n_lines):
        kind = rng.random()
        if kind < 0.4:
            a, b = rng.randint(0, 999), rng.randint(0, 999)
            op = rng.choice(["+", "-", "*"])
            value = {"+": a + b, "-": a - b, "*": a * b}[op]
            lines.append(f"What is {a} {op} {b}? The answer is {value}. #### {value} \\boxed{{{value}}}")
        elif kind < 0.8:
            lines.append(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 16))).capitalize() + ".")
        else:
            q = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 8)))
            lines.append(
                f"<|im_start|>user\n{q}?<|im_end|>\n<|im_start|>assistant\n<think>{q}</think> ok<|im_end|>"
            )
    return lines


def build_tokenizer(spec: TinyModelSpec, out_dir: Path):
    """Train the byte-level BPE tokenizer and save it as a ``PreTrainedTokenizerFast`` in ``out_dir``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # Digits are split one per token, so arithmetic stays learnable for a tiny model.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(spec.seed), trainer=trainer)
    tok.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in TAG_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        model_max_length=spec.max_position_embeddings,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)
    return fast


def build_model(spec: TinyModelSpec, tokenizer, out_dir: Path) -> None:
    """Initialise a ``Qwen2ForCausalLM`` of the given size (seeded) and save it as safetensors."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    vocab = ((len(tokenizer) + 63) // 64) * 64
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        rope_theta=10000.0,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    torch.manual_seed(spec.seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    model.save_pretrained(out_dir, safe_serialization=True)


def build_tiny_model(
    spec: TinyModelSpec | None = None, cache_dir: str | Path | None = None, force: bool = False
) -> Path:
    """Return the directory of the tiny model for ``spec``, building it first if needed.

    The build is atomic (written to a temporary directory, then renamed), so readers never see a
    half-written model, and serialised by a file lock beside it, so concurrent callers (several
    processes, e.g. parallel test workers) build it once and the others wait for that build.
    """
    spec = spec or TinyModelSpec()
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    target = root / f"tiny-qwen2-{spec.key()}"
    if target.joinpath("model.safetensors").exists() and not force:
        return target
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f".{target.name}.lock")):
        if target.joinpath("model.safetensors").exists() and not force:
            return target  # built by another process while this one waited
        _build_into(spec, root, target, force)
    return target


def _build_into(spec: TinyModelSpec, root: Path, target: Path, force: bool) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
    try:
        tokenizer = build_tokenizer(spec, tmp)
        build_model(spec, tokenizer, tmp)
        (tmp / "atropos_tiny_spec.json").write_text(json.dumps(asdict(spec), indent=2))
        if force and target.exists():
            shutil.rmtree(target)
        try:
            tmp.rename(target)
        except OSError:
            if not target.joinpath("model.safetensors").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Build the tiny local Qwen2 model and tokenizer.")
    parser.add_argument(
        "--out", default=None, help="cache directory (default $ATROPOS_CACHE_DIR or ~/.cache/atroposlib)"
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = parser.parse_args(argv)
    print(build_tiny_model(cache_dir=args.out, force=args.force))


if __name__ == "__main__":
    main()
