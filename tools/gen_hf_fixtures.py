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
import struct
import sys

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import torch
import transformers
from packaging import version
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO_ROOT, "tests", "fixtures", "hf")

INIT_STD = 0.1
NORM_JITTER = 0.1
SEQ_LENGTHS = (1, 7, 24)

_TF_VERSION = version.parse(transformers.__version__)
# transformers renamed the from_pretrained/config keyword torch_dtype -> dtype in 4.56.
_DTYPE_KW = "dtype" if _TF_VERSION >= version.parse("4.56.0") else "torch_dtype"

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


def write_logits(path, logits):
    arr = np.ascontiguousarray(logits, dtype="<f4")
    n_tokens, n_vocab = arr.shape
    with open(path, "wb") as f:
        f.write(struct.pack("<ii", n_tokens, n_vocab))
        f.write(arr.tobytes())


def write_hidden(path, states):
    arr = np.ascontiguousarray(states, dtype="<f4")
    n_states, n_tokens, hidden = arr.shape
    with open(path, "wb") as f:
        f.write(struct.pack("<iii", n_states, n_tokens, hidden))
        f.write(arr.tobytes())


def first_tensor(output):
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)):
        return output[0]
    raise TypeError(f"unexpected hook output type {type(output)}")


def run_with_states(model, tokens):
    """Forward one sequence; return (logits [T,V], states [L+1,T,H]) as float32 numpy."""
    captured = {}
    handles = []

    def hook_for(idx):
        def hook(_module, _inputs, output):
            captured[idx] = first_tensor(output).detach().clone()
        return hook

    handles.append(model.model.embed_tokens.register_forward_hook(hook_for(0)))
    for k, layer in enumerate(model.model.layers):
        handles.append(layer.register_forward_hook(hook_for(k + 1)))
    try:
        ids = torch.tensor([tokens], dtype=torch.long)
        with torch.no_grad():
            out = model(input_ids=ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()

    n_states = len(model.model.layers) + 1
    assert sorted(captured) == list(range(n_states)), sorted(captured)
    states = torch.stack([captured[i][0] for i in range(n_states)])  # [S, T, H]
    logits = out.logits[0]
    assert logits.dtype == torch.float32 and states.dtype == torch.float32

    # Sanity check: final norm of the last state through lm_head reproduces logits.
    with torch.no_grad():
        recomputed = model.lm_head(model.model.norm(states[-1:]))[0]
    err = (recomputed - logits).abs().max().item()
    scale = logits.abs().max().item()
    assert err <= 1e-5 * max(1.0, scale), f"lm_head(norm(h_L)) mismatch: {err}"
    return logits.numpy(), states.numpy()


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
        fdir, attn_implementation="eager", **{_DTYPE_KW: torch.float32})
    reloaded.eval()
    assert type(reloaded) is spec["cls"], type(reloaded)
    check_reload_matches(model, reloaded)

    cfg = reloaded.config
    n_layers = cfg.num_hidden_layers
    hidden = cfg.hidden_size
    vocab = cfg.vocab_size

    gdir = os.path.join(fdir, "golden")
    os.makedirs(gdir)
    seqs_meta = []
    for i, tokens in enumerate(make_sequences(vocab, seed + 1000)):
        logits, states = run_with_states(reloaded, tokens)
        assert logits.shape == (len(tokens), vocab)
        assert states.shape == (n_layers + 1, len(tokens), hidden)
        assert np.isfinite(logits).all() and np.isfinite(states).all()
        write_logits(os.path.join(gdir, f"logits_{i}.bin"), logits)
        write_hidden(os.path.join(gdir, f"hidden_{i}.bin"), states)
        seqs_meta.append({
            "tokens": tokens,
            "logits": f"logits_{i}.bin",
            "hidden": f"hidden_{i}.bin",
            "top1": [int(x) for x in logits.argmax(axis=-1)],
        })

    meta = {
        "generator": "tools/gen_hf_fixtures.py",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "architecture": type(reloaded).__name__,
        "saved_dtype": spec["dtype"],
        "n_layers": n_layers,
        "hidden_size": hidden,
        "vocab_size": vocab,
        "sequences": seqs_meta,
    }
    with open(os.path.join(gdir, "golden.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")

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
