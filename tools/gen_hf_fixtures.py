#!/usr/bin/env python3
"""Generate tiny random-init Hugging Face checkpoints and HF float32 golden outputs.

This script builds a handful of very small decoder-only models (Llama, Qwen2,
Qwen3 variants) with Hugging Face `transformers` + `torch`, entirely from
config objects (nothing is downloaded).  Each model gets deterministic random
weights, is saved in HF layout (config.json, generation_config.json,
*.safetensors [+ model.safetensors.index.json when sharded]) in a chosen dtype,
then reloaded from disk in float32 and run on a few fixed token sequences.  The
float32 logits and per-layer hidden states of the reloaded model are written as
small binary files, so tessera's loaders and reference forward pass can be
checked against HF transformers without network access or big downloads.

Output layout (default: tests/fixtures/hf/ under the repository root):

    <out>/<fixture>/config.json
    <out>/<fixture>/generation_config.json
    <out>/<fixture>/model.safetensors            (or model-0000k-of-0000n.safetensors
                                                  + model.safetensors.index.json)
    <out>/<fixture>/golden/golden.json
    <out>/<fixture>/golden/logits_<i>.bin
    <out>/<fixture>/golden/hidden_<i>.bin

Binary formats (all little-endian):

    logits_<i>.bin: int32 n_tokens, int32 n_vocab,
                    then n_tokens*n_vocab float32, row-major (position-major)
    hidden_<i>.bin: int32 n_states, int32 n_tokens, int32 hidden_size,
                    then n_states*n_tokens*hidden_size float32.
                    n_states = num_hidden_layers + 1; state 0 is the embedding
                    lookup output, state k (1..L) is the residual stream leaving
                    decoder layer k-1 (before the final norm).

Weights are re-initialised after construction so that logits are not
degenerate: Linear/Embedding weights ~ N(0, 0.1^2), biases ~ N(0, 0.1^2),
RMSNorm weights = 1 + 0.1*N(0, 1).

How to run (use a virtual environment outside the repository):

    python3 -m venv /some/venv
    /some/venv/bin/pip install torch transformers safetensors numpy
    CUDA_VISIBLE_DEVICES="" /some/venv/bin/python tools/gen_hf_fixtures.py [--out DIR]

The output is deterministic: rerunning with the same torch/transformers
versions produces byte-identical files.  Versions used are recorded in each
golden.json and in config.json ("transformers_version").
"""

import argparse
import json
import os
import shutil
import sys

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import torch
import transformers
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from hf_golden import dtype_kwarg, write_golden  # the writer deploy's goldens share

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO_ROOT, "tests", "fixtures", "hf")

INIT_STD = 0.1
NORM_JITTER = 0.1
SEQ_LENGTHS = (1, 7, 24)


DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


# --------------------------------------------------------------------------- #
# Fixture definitions
# --------------------------------------------------------------------------- #

def fixture_specs():
    """Return the list of fixtures: (name, model class, config, saved dtype, save kwargs)."""
    specs = []

    specs.append(dict(
        name="llama_gqa_rope3",
        cls=LlamaForCausalLM,
        config=LlamaConfig(
            hidden_size=64,
            intermediate_size=160,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=256,
            max_position_embeddings=256,
            rope_theta=500000.0,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            bos_token_id=1,
            eos_token_id=[2, 3],
        ),
        dtype="bfloat16",
        save_kwargs={},
    ))

    specs.append(dict(
        name="llama_mha",
        cls=LlamaForCausalLM,
        config=LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=4,
            vocab_size=256,
            max_position_embeddings=256,
            rope_theta=130000.0,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            bos_token_id=1,
            eos_token_id=2,
        ),
        dtype="float32",
        save_kwargs={},
    ))

    specs.append(dict(
        name="llama_untied_sharded",
        cls=LlamaForCausalLM,
        config=LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=3,
            num_attention_heads=8,
            num_key_value_heads=2,
            vocab_size=320,
            max_position_embeddings=256,
            rope_theta=10000.0,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            bos_token_id=1,
            eos_token_id=2,
        ),
        dtype="float16",
        # ~290 KB of fp16 weights -> 3 shards
        save_kwargs={"max_shard_size": "100KB"},
        expect_shards=(2, 4),
    ))

    specs.append(dict(
        name="qwen2_bias",
        cls=Qwen2ForCausalLM,
        config=Qwen2Config(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=256,
            max_position_embeddings=256,
            rope_theta=1000000.0,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            use_sliding_window=False,
            bos_token_id=1,
            eos_token_id=2,
        ),
        dtype="bfloat16",
        save_kwargs={},
    ))

    specs.append(dict(
        name="qwen3_qknorm",
        cls=Qwen3ForCausalLM,
        config=Qwen3Config(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            vocab_size=256,
            max_position_embeddings=256,
            rope_theta=1000000.0,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            use_sliding_window=False,
            bos_token_id=1,
            eos_token_id=2,
        ),
        dtype="bfloat16",
        save_kwargs={},
    ))

    specs.append(dict(
        name="llama_attn_bias",
        cls=LlamaForCausalLM,
        config=LlamaConfig(
            hidden_size=48,
            intermediate_size=96,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=16,
            vocab_size=200,
            max_position_embeddings=256,
            rope_theta=10000.0,
            rms_norm_eps=1e-5,
            attention_bias=True,
            mlp_bias=True,
            tie_word_embeddings=False,
            bos_token_id=1,
            eos_token_id=2,
        ),
        dtype="float32",
        save_kwargs={},
    ))

    return specs


# --------------------------------------------------------------------------- #
# Helpers
# --------------------------------------------------------------------------- #

def reinit_weights(model, seed):
    """Deterministically re-initialise every parameter (shared ones once)."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    seen = set()
    with torch.no_grad():
        for mod_name, module in model.named_modules():
            is_norm = "RMSNorm" in type(module).__name__
            for p_name, param in module.named_parameters(recurse=False):
                if id(param) in seen:
                    continue
                seen.add(id(param))
                noise = torch.randn(param.shape, generator=gen, dtype=torch.float32)
                if is_norm and p_name == "weight":
                    new = 1.0 + NORM_JITTER * noise
                elif isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                    new = INIT_STD * noise
                else:
                    raise RuntimeError(
                        f"unexpected parameter {mod_name}.{p_name} in {type(module).__name__}")
                param.copy_(new.to(param.dtype))


def make_sequences(vocab_size, seed):
    rng = np.random.default_rng(seed)
    seqs = [[1]]
    seqs.append([int(x) for x in rng.integers(0, vocab_size, size=SEQ_LENGTHS[1])])
    s2 = [int(x) for x in rng.integers(0, vocab_size, size=SEQ_LENGTHS[2])]
    s2[5] = 0
    s2[17] = vocab_size - 1
    seqs.append(s2)
    return seqs


def check_reload_matches(saved_model, reloaded):
    """The reloaded fp32 weights must equal the saved (low-precision) weights exactly."""
    want = {k: v.float() for k, v in saved_model.state_dict().items()}
    got = reloaded.state_dict()
    assert set(want) == set(got), (sorted(set(want) ^ set(got)))
    for k in want:
        if not torch.equal(want[k], got[k]):
            raise AssertionError(f"reloaded tensor {k} differs from saved weights")


def build_fixture(spec, out_dir, seed):
    name = spec["name"]
    fdir = os.path.join(out_dir, name)
    if os.path.isdir(fdir):
        shutil.rmtree(fdir)
    os.makedirs(fdir)

    config = spec["config"]
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = spec["cls"](config)
    reinit_weights(model, seed)
    model.eval()

    save_dtype = DTYPES[spec["dtype"]]
    model = model.to(save_dtype)
    model.save_pretrained(fdir, safe_serialization=True, **spec["save_kwargs"])

    shards = sorted(f for f in os.listdir(fdir) if f.endswith(".safetensors"))
    lo, hi = spec.get("expect_shards", (1, 1))
    if not (lo <= len(shards) <= hi):
        raise AssertionError(f"{name}: expected {lo}..{hi} shards, got {shards}")
    if len(shards) > 1:
        assert os.path.exists(os.path.join(fdir, "model.safetensors.index.json"))

    reloaded = AutoModelForCausalLM.from_pretrained(
        fdir, attn_implementation="eager", **{dtype_kwarg(): torch.float32})
    reloaded.eval()
    assert type(reloaded) is spec["cls"], type(reloaded)
    check_reload_matches(model, reloaded)

    vocab = reloaded.config.vocab_size
    gdir = os.path.join(fdir, "golden")
    os.makedirs(gdir)
    write_golden(gdir, reloaded, make_sequences(vocab, seed + 1000), "tools/gen_hf_fixtures.py",
                 extra={"saved_dtype": spec["dtype"]})

    total = 0
    for root, _dirs, files in os.walk(fdir):
        for fn in files:
            total += os.path.getsize(os.path.join(root, fn))
    if total >= 1_000_000:
        raise AssertionError(f"{name}: fixture is {total} bytes, must stay under 1 MB")
    print(f"{name}: {len(shards)} safetensors file(s), {total} bytes")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT,
                    help="output directory (default: tests/fixtures/hf in the repo)")
    args = ap.parse_args(argv)

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()

    os.makedirs(args.out, exist_ok=True)
    for idx, spec in enumerate(fixture_specs()):
        build_fixture(spec, args.out, seed=1234 + idx)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
