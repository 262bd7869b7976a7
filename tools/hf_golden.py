#!/usr/bin/env python3
"""Hugging Face golden logits for any checkpoint, for tessera's phase 0.

    PYTHON tools/hf_golden.py MODEL_DIR|FILE.gguf OUT_DIR [--prompts PROMPTS_JSON] [--threads N] [--no-hidden]
    python3 tools/hf_golden.py --print-prompts MODEL_DIR        (no torch needed)

Loads MODEL_DIR with transformers in float32 (eager attention, on the CPU), runs each token
prompt alone (batch 1, no padding, use_cache=False) and writes OUT_DIR/golden.json with
logits_<i>.bin and hidden_<i>.bin beside it (a GGUF file is loaded by transformers'
own GGUF reader, `gguf_file=`, which dequantizes and un-permutes independently of tessera): the
format phase 0 reads (src/deploy/golden.c;
tests/fixtures/hf/README.md describes it). MODEL_DIR is only read.

Prompts. `tessera deploy MODEL --hf-python PYTHON` writes the exact token ids phase 0 compares
to DEPLOY/golden/hf_prompts.json ({"sequences": [{"tokens": [...]}, ...]}) and passes it as
--prompts; golden.json carries the tokens back, and phase 0 refuses a golden whose tokens differ,
so the two sides cannot drift. Without --prompts this script uses phase 0's canonical prompts
computed the same way as src/deploy/phase0_oracle.c (canonical_prompts below; tests/test_hf_golden.sh
checks `--print-prompts` against the file tessera writes).

Needs torch and transformers, in a virtual environment outside the repository:

    python3 -m venv /path/venv-hf
    /path/venv-hf/bin/pip install torch transformers safetensors numpy
    /path/venv-hf/bin/python tools/hf_golden.py MODEL_DIR OUT_DIR

Exit status: 0 written; 2 bad input (model directory, prompts file); 3 torch, transformers or
numpy missing; 1 anything else (the message says what).

tools/gen_hf_fixtures.py imports run_with_states and write_golden from here, so the test
fixtures and deploy's goldens are written by the same code.
"""

import argparse
import json
import os
import struct
import sys

VENV_HELP = ("create a virtual environment outside the repository: python3 -m venv /path/venv-hf && "
             "/path/venv-hf/bin/pip install torch transformers safetensors numpy; then run this script "
             "with /path/venv-hf/bin/python (tessera deploy MODEL --hf-python /path/venv-hf/bin/python)")

# Phase 0's canonical prompts (src/deploy/phase0_oracle.c, canonical_seq): BOS alone, then 8 and 32
# ids from a 64-bit LCG over the whole vocabulary, BOS first when config.json names one.
CANONICAL_LENGTHS = (1, 8, 32)
_MASK64 = (1 << 64) - 1


def canonical_prompts(config):
    """The token prompts phase 0 runs without a golden file, from a config.json dict."""
    vocab = int(config["vocab_size"])
    bos = config.get("bos_token_id")
    seqs = []
    for k, n in enumerate(CANONICAL_LENGTHS):
        s = 0x7e55e7a0 + k
        toks = []
        for _ in range(n):
            s = (s * 6364136223846793005 + 1442695040888963407) & _MASK64
            toks.append((s >> 33) % vocab)
        if isinstance(bos, int) and bos >= 0:
            toks[0] = bos
        seqs.append(toks)
    return seqs


def write_logits(path, logits):
    import numpy as np
    arr = np.ascontiguousarray(logits, dtype="<f4")
    n_tokens, n_vocab = arr.shape
    with open(path, "wb") as f:
        f.write(struct.pack("<ii", n_tokens, n_vocab))
        f.write(arr.tobytes())


def write_hidden(path, states):
    import numpy as np
    arr = np.ascontiguousarray(states, dtype="<f4")
    n_states, n_tokens, hidden = arr.shape
    with open(path, "wb") as f:
        f.write(struct.pack("<iii", n_states, n_tokens, hidden))
        f.write(arr.tobytes())


def _first_tensor(output):
    import torch
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)):
        return output[0]
    raise TypeError(f"unexpected hook output type {type(output)}")


def run_with_states(model, tokens):
    """Forward one sequence; return (logits [T,V], states [L+1,T,H]) as float32 numpy.

    State 0 is the embedding output, state k the residual stream leaving layer k-1, before
    the final norm (output_hidden_states would give the normed last state instead)."""
    import torch
    captured = {}
    handles = []

    def hook_for(idx):
        def hook(_module, _inputs, output):
            captured[idx] = _first_tensor(output).detach().clone()
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


def write_golden(gdir, model, sequences, generator, extra=None, hidden=True):
    """Runs each token list through model (float32) and writes logits_<i>.bin, hidden_<i>.bin
    (unless hidden=False) and golden.json into gdir. extra: fields after "architecture"."""
    import numpy as np
    import torch
    import transformers
    cfg = model.config
    n_layers, hidden_size, vocab = cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size
    seqs_meta = []
    for i, tokens in enumerate(sequences):
        logits, states = run_with_states(model, tokens)
        assert logits.shape == (len(tokens), vocab), logits.shape
        assert states.shape == (n_layers + 1, len(tokens), hidden_size), states.shape
        if not (np.isfinite(logits).all() and np.isfinite(states).all()):
            raise ValueError(f"sequence {i}: transformers produced NaN/Inf")
        write_logits(os.path.join(gdir, f"logits_{i}.bin"), logits)
        meta = {"tokens": [int(t) for t in tokens], "logits": f"logits_{i}.bin"}
        if hidden:
            write_hidden(os.path.join(gdir, f"hidden_{i}.bin"), states)
            meta["hidden"] = f"hidden_{i}.bin"
        meta["top1"] = [int(x) for x in logits.argmax(axis=-1)]
        seqs_meta.append(meta)

    meta = {
        "generator": generator,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "architecture": type(model).__name__,
    }
    meta.update(extra or {})
    meta.update({"n_layers": n_layers, "hidden_size": hidden_size, "vocab_size": vocab, "sequences": seqs_meta})
    with open(os.path.join(gdir, "golden.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    return seqs_meta


def dtype_kwarg():
    """transformers renamed the from_pretrained keyword torch_dtype -> dtype in 4.56."""
    import transformers
    from packaging import version
    return "dtype" if version.parse(transformers.__version__) >= version.parse("4.56.0") else "torch_dtype"


class InputError(Exception):
    pass


def read_prompts(path, vocab):
    try:
        with open(path, encoding="utf-8") as f:
            root = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: {e}") from e
    seqs = root.get("sequences") if isinstance(root, dict) else None
    if not isinstance(seqs, list) or not seqs:
        raise InputError(f'{path}: expected {{"sequences": [{{"tokens": [...]}}, ...]}}')
    out = []
    for i, s in enumerate(seqs):
        toks = s.get("tokens") if isinstance(s, dict) else None
        if not isinstance(toks, list) or not toks or not all(isinstance(t, int) and 0 <= t < vocab for t in toks):
            raise InputError(f"{path}: sequences[{i}].tokens must be a non-empty list of ids in [0, {vocab})")
        out.append(toks)
    return out


def is_gguf(model):
    """A GGUF file (tessera deploy takes one as MODEL): transformers reads it with gguf_file=,
    dequantizing and undoing llama.cpp's Q/K row permutation itself."""
    if not os.path.isfile(model):
        return False
    with open(model, "rb") as f:
        return f.read(4) == b"GGUF"


def read_gguf_config(path):
    """vocab_size and bos_token_id of a GGUF (the `gguf` package, as transformers needs it)."""
    try:
        import gguf
    except ImportError as e:
        raise InputError(f"{path}: reading a GGUF needs the `gguf` package ({e}); {VENV_HELP}") from e
    try:
        r = gguf.GGUFReader(path)
    except Exception as e:  # noqa: BLE001 - any parse failure is bad input
        raise InputError(f"{path}: not a readable GGUF ({e})") from e
    cfg = {}
    for t in r.tensors:
        if t.name == "token_embd.weight":
            cfg["vocab_size"] = int(t.shape.tolist()[1])
    f = r.fields.get("tokenizer.ggml.bos_token_id")
    if f is not None:
        bos = int(f.parts[f.data[0]][0])
        if bos != 0xFFFFFFFF:
            cfg["bos_token_id"] = bos
    if "vocab_size" not in cfg:
        raise InputError(f"{path}: no token_embd.weight tensor")
    return cfg


def load_model(model, torch):
    """float32, eager attention, from an HF directory or a GGUF file."""
    from transformers import AutoModelForCausalLM
    kw = {"attn_implementation": "eager", dtype_kwarg(): torch.float32}
    if is_gguf(model):
        from transformers import AutoConfig
        where = {"pretrained_model_name_or_path": os.path.dirname(os.path.abspath(model)),
                 "gguf_file": os.path.basename(model)}
        cfg = AutoConfig.from_pretrained(**where)
        # llama.cpp writes "no padding token" as 0xffffffff, which transformers' embedding refuses
        if cfg.pad_token_id is not None and not 0 <= cfg.pad_token_id < cfg.vocab_size:
            cfg.pad_token_id = None
        return AutoModelForCausalLM.from_pretrained(config=cfg, **where, **kw)
    return AutoModelForCausalLM.from_pretrained(model, **kw)


def read_config(model_dir):
    if is_gguf(model_dir):
        return read_gguf_config(model_dir)
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: {e}") from e
    if not isinstance(cfg, dict) or not isinstance(cfg.get("vocab_size"), int) or cfg["vocab_size"] < 1:
        raise InputError(f"{path}: no integer vocab_size")
    return cfg


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", metavar="MODEL_DIR")
    ap.add_argument("out", metavar="OUT_DIR", nargs="?")
    ap.add_argument("--prompts", help="JSON {\"sequences\": [{\"tokens\": [...]}]} (default: phase 0's canonical prompts)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    ap.add_argument("--no-hidden", action="store_true", help="write logits only, no per-layer hidden states")
    ap.add_argument("--print-prompts", action="store_true", help="print phase 0's canonical prompts for MODEL_DIR as JSON and exit")
    args = ap.parse_args(argv)
    me = "tools/hf_golden.py"
    try:
        cfg = read_config(args.model)
        if args.print_prompts:
            print(json.dumps({"sequences": [{"tokens": t} for t in canonical_prompts(cfg)]}))
            return 0
        if not args.out:
            raise InputError("expects MODEL_DIR OUT_DIR")
        prompts = read_prompts(args.prompts, cfg["vocab_size"]) if args.prompts else canonical_prompts(cfg)
        if os.path.realpath(args.out).startswith(os.path.realpath(args.model) + os.sep) or \
                os.path.realpath(args.out) == os.path.realpath(args.model):
            raise InputError(f"{args.out}: refusing to write inside the model directory {args.model}")
    except InputError as e:
        print(f"{me}: {e}", file=sys.stderr)
        return 2

    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # the golden is a CPU float32 run
    try:
        import numpy  # noqa: F401
        import torch
        import transformers
    except ImportError as e:
        print(f"{me}: {sys.executable} cannot import torch/transformers/numpy ({e}); {VENV_HELP}", file=sys.stderr)
        return 3

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    model = load_model(args.model, torch)
    model.eval()
    if any(p.dtype != torch.float32 for p in model.parameters()):
        raise RuntimeError("the model did not load in float32")
    os.makedirs(args.out, exist_ok=True)
    seqs = write_golden(args.out, model, prompts, me,
                        extra={"model": os.path.abspath(args.model), "dtype": "float32", "attention": "eager"},
                        hidden=not args.no_hidden)
    print(f"{me}: {type(model).__name__}, {len(seqs)} prompts ({', '.join(str(len(s['tokens'])) for s in seqs)} tokens), "
          f"transformers {transformers.__version__}, torch {torch.__version__} -> {os.path.join(args.out, 'golden.json')}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:  # one line naming the failure, not a traceback to dig through
        print(f"tools/hf_golden.py: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
