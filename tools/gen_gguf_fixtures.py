#!/usr/bin/env python3
"""Generate GGUF test fixtures: tiny HF checkpoints, their llama.cpp GGUF conversions, and references.

Everything lands in tests/fixtures/gguf/ (tests/fixtures/gguf/README.md describes every file).
For each of three tiny architectures (llama, qwen2, qwen3) this script

  1. trains a tiny tokenizer on a small corpus written below (llama: SentencePiece BPE with byte
     fallback, saved as tokenizer.model plus the transformers tokenizer.json; qwen2/qwen3: a
     byte-level BPE trained with `tokenizers` whose normalizer, pre-tokenizer and decoder are
     copied verbatim from the real Qwen3 tokenizer.json, plus Qwen's added tokens);
  2. builds the model from a config with deterministic random weights (the same re-init as
     tools/gen_hf_fixtures.py) and saves it in float32 safetensors (HF layout, hf/);
  3. writes HF float32 reference logits and hidden states (golden/, tools/hf_golden.py format);
  4. converts it with llama.cpp's convert_hf_to_gguf.py (f32, and bf16/f16 for qwen2), checks
     that every tensor of the f32 GGUF is bit-identical to the HF tensor (llama: after undoing
     the converter's Q/K row permutation), quantizes it with `llama-quantize --pure` (Q8_0 and
     Q4_0 for llama and qwen3) and writes gguf-py's dequantization of a few tensors (dequant/);
  5. records tokenizer cases: ids from the HF tokenizer (tokenizer.json), from llama.cpp's
     llama-tokenize on the GGUF, and (llama) from the sentencepiece library.

It also makes vocab-only GGUFs of the real Llama-3 and Qwen3 tokenizers
(tests/fixtures/shared/tokenizers/*.tar.xz) and records llama.cpp's greedy continuation and
logits for stories260K (tests/fixtures/shared/models/stories260K.gguf) with
tools/gguf_fixtures_probe.c, compiled against libllama.

Usage (nothing is downloaded; llama.cpp lives outside the repository):

    VENV/bin/python tools/gen_gguf_fixtures.py --llama-cpp /work/llama.cpp \
        [--llama-bin /work/llama.cpp/build/bin] [--out tests/fixtures/gguf] \
        [--work /tmp/gguf-work] [--vocab-out /work/gguf-vocab]

VENV needs torch, transformers, safetensors, numpy, sentencepiece, tokenizers, protobuf (for the
SentencePiece -> tokenizer.json conversion in transformers). llama.cpp's own gguf-py
(LLAMA_CPP/gguf-py) is put first on the path, for the converter and for dequantization, so both
match the llama.cpp commit. llama.cpp build (CPU only):

    cmake -B build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DCMAKE_BUILD_TYPE=Release
    cmake --build build -j2 --target llama-quantize llama-simple llama-tokenize

Pre-tokenizer detection. convert_hf_to_gguf.py names a BPE pre-tokenizer
("tokenizer.ggml.pre") by hashing the ids the tokenizer gives for a fixed check string, and only
knows the hashes of real published vocabularies. Our tiny qwen vocab has the Qwen2 pre-tokenizer
but an unknown hash, so the converter is run through `--convert-wrapper` (this same file), which
replaces TextModel.get_vocab_base_pre with a function returning "qwen2" before calling the
converter's main(). The wrapper also lifts "rope_theta" out of transformers 5's
"rope_parameters" (the converter reads only the top-level key and would write no
rope.freq_base). The real-vocabulary conversions (--vocab-only) need neither patch.

The output is deterministic for fixed package versions (recorded in manifest.json).
"""

import argparse
import hashlib
import json
import lzma
import os
import shutil
import struct
import subprocess
import sys
import tarfile

TOOLS = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(TOOLS)
DEFAULT_OUT = os.path.join(REPO_ROOT, "tests", "fixtures", "gguf")
SHARED = os.path.join(REPO_ROOT, "tests", "fixtures", "shared")
STORIES = os.path.join(SHARED, "models", "stories260K.gguf")
VOCAB_XZ_LIMIT = 1_600_000

# --------------------------------------------------------------------------- #
# Converter wrapper (runs in a child process: gen_gguf_fixtures.py --convert-wrapper ...)
# --------------------------------------------------------------------------- #


def convert_wrapper(argv):
    """--convert-wrapper LLAMA_CPP PRE|- CONVERTER_ARGS...: run convert_hf_to_gguf.main().

    PRE other than "-" forces tokenizer.ggml.pre to PRE (our tiny BPE vocab has no known hash)."""
    llama_cpp, pre, rest = argv[0], argv[1], argv[2:]
    sys.path.insert(0, os.path.join(llama_cpp, "gguf-py"))
    sys.path.insert(0, llama_cpp)
    import convert_hf_to_gguf as conv
    if pre != "-":
        def forced_pre(self, tokenizer, _pre=pre):
            return _pre
        conv.TextModel.get_vocab_base_pre = forced_pre
    # transformers 5 keeps RoPE's theta only inside "rope_parameters" (AutoConfig.to_dict()), and
    # this converter reads the top-level "rope_theta" transformers 4 had: without it the GGUF
    # gets no rope.freq_base, which llama.cpp (and tessera) read as 10000. Lift it back up.
    orig_load = conv.ModelBase.load_hparams

    def load_hparams(*args, **kwargs):
        hp = orig_load(*args, **kwargs)
        for h in (hp, hp.get("text_config") or {}):
            rp = h.get("rope_parameters") or {}
            if "rope_theta" not in h and "rope_theta" in rp:
                h["rope_theta"] = rp["rope_theta"]
        return hp
    conv.ModelBase.load_hparams = staticmethod(load_hparams)
    sys.argv = ["convert_hf_to_gguf.py"] + rest
    conv.main()
    return 0


# --------------------------------------------------------------------------- #
# Corpus and tokenizer test strings (written for these fixtures)
# --------------------------------------------------------------------------- #

CORPUS = """\
The little robot walked along the river and counted the stones, one by one.
Every morning the baker opens her shop at seven and sells bread, rolls and cakes.
A quick brown fox jumps over the lazy dog while the cat watches from the window.
In 1969 two astronauts walked on the Moon; the trip took about 76 hours each way.
Prices went up by 3.5% last year, so a coffee now costs 2.40 instead of 2.30.
She asked: "Where are you going?" and he answered, 'To the station, of course!'
The function returns -1 when the list is empty, otherwise the index of the item.
if (x > 0) { y = x * 2; } else { y = 0; } // a tiny piece of code
Rain fell on the old town, and the streets were quiet until the bells rang at noon.
We planted tomatoes, beans, peppers and three kinds of flowers in the garden.
The museum has paintings from Paris, Vienna and Madrid, and a small café upstairs.
Le garçon mange une pomme près de la fenêtre; il fait très beau aujourd'hui.
Der Bär schläft im Wald, und die Vögel singen über dem Fluss.
El niño jugó en el parque con su perro durante toda la tarde.
東京の天気は晴れです。私は本を読みます。今日はいい日です。
我们今天去公园散步，天气很好。他喜欢喝茶。
Numbers like 12, 345, 6789 and 100000 appear in tables, lists and reports.
Dear team,\n\nthe meeting moves to Thursday at 10:30. Please bring your notes.\n\nThanks!
Once upon a time there was a girl who loved to read stories about dragons and ships.
They're sure it'll work, but we've seen what happens when the wind changes.
Lists: apples; oranges; pears -- and, of course, bananas!!! (Really?) Yes...
The answer is 42. The question, however, remains unknown to everyone in the galaxy.
    Indented lines keep their spaces, and	tabs	separate	columns.
Good night, sleep tight, and see you tomorrow morning at the usual place.
"""

TOKENIZER_CASES = [
    "Hello world",
    "Once upon a time, there was a little girl.",
    "  two leading spaces and two trailing  ",
    "a  b   c    d",
    "The year 2024 had 366 days; pi is 3.14159 and 1,000,000 is a million.",
    "Punctuation!? (yes) [no] {maybe} -- 'single' \"double\" ... end.",
    "line one\nline two\n\n\ttabbed line\r\nwindows line",
    "caf\u00e9, na\u00efve, r\u00e9sum\u00e9, \u00c6r\u00f8sk\u00f8bing, Stra\u00dfe",
    "cafe\u0301 (decomposed accent)",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u4e2d\u6587\u6587\u672c",
    "emoji \U0001F999 and \U0001F680!",
    "I've been 'told he's there, 'RE you sure? We'Ve a'lL",
    "ALL CAPS and MiXeD cAsE words",
    "",
    "   ",
]
SPECIAL_CASES = {
    "llama": ["<s>hello</s> world", "text with <unk> inside"],
    "qwen": ["<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n",
             "<think>\nhmm\n</think>\n\nOK<|endoftext|>"],
}

# --------------------------------------------------------------------------- #
# Fixture definitions
# --------------------------------------------------------------------------- #

LLAMA_SP_VOCAB = 360
QWEN_BPE_BASE = 299                      # byte-level BPE size before the added tokens
QWEN_ADDED = [                           # (content, special), appended after the BPE vocab
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<think>", False),
    ("</think>", False),
]
QWEN_TOK_SIZE = QWEN_BPE_BASE + len(QWEN_ADDED)  # 304


def fixture_specs():
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config
    eot = QWEN_BPE_BASE          # <|endoftext|>
    im_end = QWEN_BPE_BASE + 2   # <|im_end|>
    return [
        dict(name="llama", tok="spm", seed=4242, quants=("Q8_0", "Q4_0"), outtypes=("f32",),
             config=LlamaConfig(
                 vocab_size=LLAMA_SP_VOCAB, hidden_size=64, intermediate_size=96,
                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 max_position_embeddings=256, rope_theta=10000.0, rms_norm_eps=1e-5,
                 tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)),
        dict(name="qwen2", tok="bpe", seed=4243, quants=(), outtypes=("bf16", "f16"),
             config=Qwen2Config(
                 vocab_size=320, hidden_size=32, intermediate_size=64,   # 16 padding rows
                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 max_position_embeddings=256, rope_theta=1000000.0, rms_norm_eps=1e-6,
                 tie_word_embeddings=True, use_sliding_window=False,
                 bos_token_id=eot, eos_token_id=im_end)),
        dict(name="qwen3", tok="bpe", seed=4244, quants=("Q8_0", "Q4_0"), outtypes=("f32",),
             config=Qwen3Config(
                 vocab_size=QWEN_TOK_SIZE, hidden_size=32, intermediate_size=64,
                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 max_position_embeddings=256, rope_theta=1000000.0, rms_norm_eps=1e-6,
                 tie_word_embeddings=True, use_sliding_window=False,
                 bos_token_id=eot, eos_token_id=im_end)),
    ]


DEQUANT_TENSORS = (("blk.0.attn_q.weight", None), ("blk.0.attn_k.weight", None),
                   ("token_embd.weight", 32))   # (name, first n rows or None = whole tensor)

# --------------------------------------------------------------------------- #
# Helpers
# --------------------------------------------------------------------------- #


def run(cmd, **kw):
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, **kw)


def write_f32_matrix(path, arr):
    """int32 n_rows, int32 n_cols, then n_rows*n_cols float32 (little-endian, row-major)."""
    import numpy as np
    a = np.ascontiguousarray(arr, dtype="<f4")
    assert a.ndim == 2
    with open(path, "wb") as f:
        f.write(struct.pack("<ii", a.shape[0], a.shape[1]))
        f.write(a.tobytes())


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def corpus_lines():
    return [ln.replace("\\n", "\n") for ln in CORPUS.splitlines() if ln.strip()]


def extract_tar(path, dest):
    os.makedirs(dest, exist_ok=True)
    with tarfile.open(path) as t:
        t.extractall(dest, filter="data")


# --------------------------------------------------------------------------- #
# Tokenizers
# --------------------------------------------------------------------------- #


def build_spm_tokenizer(hf_dir):
    """SentencePiece BPE, byte fallback, Llama-2 style normalisation (identity, dummy prefix)."""
    import io
    import sentencepiece as spm
    import transformers
    buf = io.BytesIO()
    lines = corpus_lines() * 4
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=buf, vocab_size=LLAMA_SP_VOCAB,
        model_type="bpe", byte_fallback=True, character_coverage=0.98, num_threads=1,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, add_dummy_prefix=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False, split_digits=True,
        allow_whitespace_only_pieces=True, max_sentencepiece_length=16,
        input_sentence_size=0, shuffle_input_sentence=False, minloglevel=2)
    with open(os.path.join(hf_dir, "tokenizer.model"), "wb") as f:
        f.write(buf.getvalue())
    # tokenizer.json laid out like Llama-2's: BPE with byte fallback over the SentencePiece pieces,
    # normalizer = prepend "▁" then spaces -> "▁", no pre-tokenizer, BOS added by the
    # post-processor, <unk> <s> </s> as special added tokens. Merges: every split of a normal
    # piece into two normal pieces, ranked by the merged piece's score (highest first), then id.
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors
    sp = spm.SentencePieceProcessor(model_file=os.path.join(hf_dir, "tokenizer.model"))
    n = sp.get_piece_size()
    vocab = {sp.id_to_piece(i): i for i in range(n)}
    normal = {sp.id_to_piece(i): i for i in range(n)
              if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i) or sp.is_unused(i))}
    ranked = []
    for piece, i in normal.items():
        for k in range(1, len(piece)):
            if piece[:k] in normal and piece[k:] in normal:
                ranked.append((-sp.get_score(i), i, piece[:k], piece[k:]))
    merges = [(l, r) for _s, _i, l, r in sorted(ranked)]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True,
                               byte_fallback=True, dropout=None))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                           normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ("<unk>", "<s>", "</s>")])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    fast = transformers.LlamaTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        legacy=True, add_bos_token=True, add_eos_token=False, clean_up_tokenization_spaces=False)
    fast.save_pretrained(hf_dir)
    with open(os.path.join(hf_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tok.to_str(pretty=True))
    # transformers writes "add_prefix_space": null, which the converter turns into
    # tokenizer.ggml.add_space_prefix = false; Llama-2's tokenizer_config.json has no such key
    # (SentencePiece's add_dummy_prefix is on), so drop it.
    tc_path = os.path.join(hf_dir, "tokenizer_config.json")
    tc = json.load(open(tc_path, encoding="utf-8"))
    tc.pop("add_prefix_space", None)
    with open(tc_path, "w", encoding="utf-8") as f:
        json.dump(tc, f, indent=2)
        f.write("\n")


def build_bpe_tokenizer(hf_dir, qwen_json):
    """Byte-level BPE with the real Qwen3 normalizer / pre-tokenizer / decoder."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers, trainers
    import transformers
    real = json.load(open(qwen_json, encoding="utf-8"))
    split = real["pre_tokenizer"]["pretokenizers"][0]
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split["pattern"]["Regex"]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=QWEN_BPE_BASE, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[])
    tok.train_from_iterator(corpus_lines() * 4, trainer=trainer)
    assert tok.get_vocab_size() == QWEN_BPE_BASE, tok.get_vocab_size()
    for content, special in QWEN_ADDED:
        t = AddedToken(content, special=special, normalized=False, single_word=False,
                       lstrip=False, rstrip=False)
        (tok.add_special_tokens if special else tok.add_tokens)([t])
    # Copy the pipeline pieces verbatim from the real tokenizer.json.
    j = json.loads(tok.to_str())
    for key in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        j[key] = real[key]
    for key in ("dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
                "fuse_unk", "byte_fallback", "ignore_merges"):
        j["model"][key] = real["model"][key]
    tok2 = Tokenizer.from_str(json.dumps(j))
    for s in corpus_lines():
        assert tok2.encode(s).ids == tok.encode(s).ids, s
    fast = transformers.Qwen2TokenizerFast(
        tokenizer_object=tok2, bos_token=None, eos_token="<|im_end|>",
        pad_token="<|endoftext|>", unk_token=None, errors="replace",
        add_prefix_space=False, clean_up_tokenization_spaces=False)
    fast.save_pretrained(hf_dir)
    # Keep the tokenizer.json pipeline exactly as copied (save_pretrained may rewrite it).
    with open(os.path.join(hf_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tok2.to_str(pretty=True))


def hf_ids(hf_dir, texts):
    """ids from the tokenizer.json (tokenizers library) and from transformers.AutoTokenizer."""
    from tokenizers import Tokenizer
    import transformers
    raw = Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json"))
    auto = transformers.AutoTokenizer.from_pretrained(hf_dir)
    out = []
    for t in texts:
        out.append(dict(text=t,
                        ids_tokenizer_json=raw.encode(t, add_special_tokens=False).ids,
                        ids_transformers=auto.encode(t, add_special_tokens=False)))
    return out, type(auto).__name__


def llamacpp_ids(llama_bin, gguf_path, text, parse_special=True):
    cmd = [os.path.join(llama_bin, "llama-tokenize"), "-m", gguf_path, "--ids", "--no-bos",
           "--log-disable", "-p", text]
    if not parse_special:
        cmd.append("--no-parse-special")
    r = subprocess.run(cmd, check=True, capture_output=True, text=True)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("[")][-1]
    return json.loads(line)


# --------------------------------------------------------------------------- #
# Models
# --------------------------------------------------------------------------- #


def unpermute_rows(w, n_head):
    """Inverse of the converter's llama Q/K row permutation (n_head = heads of that matrix)."""
    import numpy as np
    rows = w.shape[0]
    return np.ascontiguousarray(
        w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


HF_TO_GGUF = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
HF_LAYER_TO_GGUF = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf_name):
    if hf_name in HF_TO_GGUF:
        return HF_TO_GGUF[hf_name]
    parts = hf_name.split(".")
    assert parts[0] == "model" and parts[1] == "layers", hf_name
    return f"blk.{parts[2]}." + HF_LAYER_TO_GGUF[".".join(parts[3:])]


def check_f32_gguf(gguf_path, hf_dir, cfg, arch):
    """Every GGUF tensor equals its HF tensor bit for bit (llama Q/K after un-permuting)."""
    import gguf
    import numpy as np
    from safetensors.numpy import load_file
    hf = load_file(os.path.join(hf_dir, "model.safetensors"))
    reader = gguf.GGUFReader(gguf_path)
    got = {}
    for t in reader.tensors:
        assert t.tensor_type == gguf.GGMLQuantizationType.F32, (t.name, t.tensor_type)
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))   # numpy order
        got[t.name] = np.asarray(t.data).reshape(shape)
    mapping = {}
    for name, w in hf.items():
        g = gguf_name(name)
        v = got[g]
        if arch == "llama" and g.endswith(("attn_q.weight", "attn_k.weight")):
            nh = cfg.num_attention_heads if g.endswith("attn_q.weight") else cfg.num_key_value_heads
            v = unpermute_rows(v, nh)
        assert v.shape == w.shape and v.tobytes() == w.tobytes(), (name, g)
        mapping[name] = g
    assert len(mapping) == len(got), sorted(set(got) - set(mapping.values()))
    return mapping


def make_sequences(vocab, seed, bos):
    import numpy as np
    rng = np.random.default_rng(seed)
    seqs = []
    for n in (8, 5):
        s = [int(x) for x in rng.integers(0, vocab, size=n)]
        if bos is not None:
            s[0] = bos
        seqs.append(s)
    seqs[0][3] = vocab - 1
    return seqs


def build_model(spec, hf_dir, gdir):
    import torch
    import transformers
    from gen_hf_fixtures import reinit_weights   # the repository's HF fixtures use the same init
    from hf_golden import dtype_kwarg, write_golden
    cfg = spec["config"]
    cfg._attn_implementation = "eager"
    torch.manual_seed(spec["seed"])
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    reinit_weights(model, spec["seed"])
    model = model.to(torch.float32).eval()
    model.save_pretrained(hf_dir, safe_serialization=True)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(
        hf_dir, attn_implementation="eager", **{dtype_kwarg(): torch.float32}).eval()
    tok_vocab = LLAMA_SP_VOCAB if spec["tok"] == "spm" else QWEN_TOK_SIZE
    seqs = make_sequences(tok_vocab, spec["seed"] + 1000, 1 if spec["tok"] == "spm" else None)
    os.makedirs(gdir, exist_ok=True)
    write_golden(gdir, reloaded, seqs, "tools/gen_gguf_fixtures.py",
                 extra={"saved_dtype": "float32"})
    return cfg


def dequant_dump(gguf_path, out_dir, prefix):
    import gguf
    reader = gguf.GGUFReader(gguf_path)
    tensors = {t.name: t for t in reader.tensors}
    files = []
    types = {}
    for t in reader.tensors:
        types[t.name] = t.tensor_type.name
    for name, nrows in DEQUANT_TENSORS:
        t = tensors[name]
        ne = [int(x) for x in t.shape.tolist()]      # GGUF order: ne0 (row length) first
        vals = gguf.quants.dequantize(t.data, t.tensor_type).reshape(ne[1], ne[0])
        if nrows is not None:
            vals = vals[:nrows]
        fn = f"{prefix}__{name}.bin"
        write_f32_matrix(os.path.join(out_dir, fn), vals)
        files.append(dict(file=fn, tensor=name, type=t.tensor_type.name, ne=ne,
                          rows=[0, int(vals.shape[0])]))
    return files, types


def tensor_types(gguf_path):
    import gguf
    r = gguf.GGUFReader(gguf_path)
    return {t.name: t.tensor_type.name for t in r.tensors}


def build_fixture(spec, args, manifest):
    name = spec["name"]
    fdir = os.path.join(args.out, name)
    hf_dir = os.path.join(fdir, "hf")
    if os.path.isdir(fdir):
        shutil.rmtree(fdir)
    os.makedirs(hf_dir)

    if spec["tok"] == "spm":
        build_spm_tokenizer(hf_dir)
    else:
        build_bpe_tokenizer(hf_dir, os.path.join(args.work, "tok", "qwen3", "tokenizer.json"))
    cfg = build_model(spec, hf_dir, os.path.join(fdir, "golden"))

    entry = dict(config={k: v for k, v in cfg.to_dict().items()
                         if k in ("architectures", "model_type", "vocab_size", "hidden_size",
                                  "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                  "num_key_value_heads", "head_dim", "rope_theta",
                                  "rms_norm_eps", "tie_word_embeddings", "bos_token_id",
                                  "eos_token_id", "attention_bias")},
                 seed=spec["seed"], gguf={}, commands=[])
    me = os.path.abspath(__file__)
    pre = "-" if spec["tok"] == "spm" else "qwen2"
    # An f32 conversion is always made (it is checked against the HF tensors and is the input of
    # llama-quantize); it is kept in the fixtures only when "f32" is in outtypes.
    outtypes = ("f32",) + tuple(t for t in spec["outtypes"] if t != "f32")
    for outtype in outtypes:
        keep = outtype in spec["outtypes"]
        out = os.path.join(fdir if keep else args.work, f"{name}-{outtype}.gguf")
        cmd = [sys.executable, me, "--convert-wrapper", args.llama_cpp, pre, hf_dir,
               "--outtype", outtype, "--outfile", out, "--model-name", f"tessera-tiny-{name}"]
        run(cmd, env=dict(os.environ, PYTHONPATH=os.path.join(args.llama_cpp, "gguf-py")),
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(args.work, f"convert-{name}-{outtype}.log"), "w"))
        entry["commands"].append(" ".join(["python", "tools/gen_gguf_fixtures.py",
                                           "--convert-wrapper", "LLAMA_CPP", pre,
                                           f"{name}/hf", "--outtype", outtype, "--outfile",
                                           f"{name}/{name}-{outtype}.gguf", "--model-name",
                                           f"tessera-tiny-{name}"]))
        if keep:
            entry["gguf"][os.path.basename(out)] = dict(outtype=outtype, types=tensor_types(out))
    f32 = os.path.join(fdir if "f32" in spec["outtypes"] else args.work, f"{name}-f32.gguf")
    entry["hf_to_gguf"] = check_f32_gguf(f32, hf_dir, cfg, name)

    if spec["quants"]:
        os.makedirs(os.path.join(fdir, "dequant"))
    for q in spec["quants"]:
        out = os.path.join(fdir, f"{name}-{q.lower()}.gguf")
        run([os.path.join(args.llama_bin, "llama-quantize"), "--pure", f32, out, q],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        entry["commands"].append(f"llama-quantize --pure {name}/{name}-f32.gguf "
                                 f"{name}/{name}-{q.lower()}.gguf {q}")
        files, types = dequant_dump(out, os.path.join(fdir, "dequant"), q.lower())
        entry["gguf"][os.path.basename(out)] = dict(outtype=q, types=types, dequant=files)

    # Tokenizer cases.
    tok_gguf_rel = f"{name}/{name}-{spec['outtypes'][0]}.gguf"
    tok_gguf = os.path.join(args.out, tok_gguf_rel)
    texts = TOKENIZER_CASES + SPECIAL_CASES["llama" if spec["tok"] == "spm" else "qwen"]
    cases, auto_cls = hf_ids(hf_dir, texts)
    for c in cases:
        c["ids_llamacpp"] = llamacpp_ids(args.llama_bin, tok_gguf, c["text"], True)
        c["ids_llamacpp_no_parse_special"] = llamacpp_ids(args.llama_bin, tok_gguf, c["text"], False)
    if spec["tok"] == "spm":
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=os.path.join(hf_dir, "tokenizer.model"))
        for c in cases:
            c["ids_sentencepiece"] = sp.encode(c["text"])
    for c in cases:
        c["agree"] = sorted({k for k in c if k.startswith("ids_")
                             if c[k] == c["ids_tokenizer_json"]})
    with open(os.path.join(fdir, "tokenizer_cases.json"), "w", encoding="utf-8") as f:
        json.dump(dict(tokenizer=f"{name}/hf/tokenizer.json", transformers_class=auto_cls,
                       add_special_tokens=False, llamacpp_gguf=tok_gguf_rel,
                       llamacpp_command="llama-tokenize -m GGUF --ids --no-bos --log-disable -p TEXT"
                                        " [--no-parse-special]",
                       cases=cases), f, ensure_ascii=False, indent=1)
        f.write("\n")
    manifest["fixtures"][name] = entry


# --------------------------------------------------------------------------- #
# Real-vocabulary GGUFs and stories260K
# --------------------------------------------------------------------------- #

REAL_CONFIGS = {
    "llama3": dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=128256,
                   hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                   num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0,
                   rms_norm_eps=1e-5, max_position_embeddings=8192, bos_token_id=128000,
                   eos_token_id=128009, tie_word_embeddings=False, torch_dtype="bfloat16"),
    "qwen3": dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=151936,
                  hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                  rope_theta=1000000.0, rms_norm_eps=1e-6, max_position_embeddings=40960,
                  bos_token_id=151643, eos_token_id=151645, tie_word_embeddings=True,
                  torch_dtype="bfloat16"),
}


def build_vocab_ggufs(args, manifest):
    os.makedirs(args.vocab_out, exist_ok=True)
    me = os.path.abspath(__file__)
    res = {}
    for name, cfg in REAL_CONFIGS.items():
        src = os.path.join(args.work, "tok", name)
        d = os.path.join(args.work, f"vocab-{name}")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(src, d)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
        out = os.path.join(args.vocab_out, f"{name}-vocab.gguf")
        run([sys.executable, me, "--convert-wrapper", args.llama_cpp, "-", d, "--vocab-only",
             "--outfile", out],
            env=dict(os.environ, PYTHONPATH=os.path.join(args.llama_cpp, "gguf-py")),
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(args.work, f"convert-{name}-vocab.log"), "w"))
        xz = out + ".xz"
        with open(out, "rb") as fi, lzma.open(xz, "wb", preset=9 | lzma.PRESET_EXTREME) as fo:
            fo.write(fi.read())
        import gguf
        r = gguf.GGUFReader(out)
        pre = r.fields["tokenizer.ggml.pre"]
        pre = bytes(pre.parts[pre.data[0]]).decode()
        info = dict(raw_bytes=os.path.getsize(out), xz_bytes=os.path.getsize(xz),
                    sha256_raw=sha256(out), tokenizer_ggml_pre=pre, config=cfg,
                    command=f"python tools/gen_gguf_fixtures.py --convert-wrapper LLAMA_CPP - "
                            f"DIR_WITH_{name.upper()}_TOKENIZER_AND_CONFIG --vocab-only "
                            f"--outfile {name}-vocab.gguf")
        if info["xz_bytes"] < VOCAB_XZ_LIMIT:
            os.makedirs(os.path.join(args.out, "vocab"), exist_ok=True)
            shutil.copy(xz, os.path.join(args.out, "vocab", os.path.basename(xz)))
            info["committed"] = f"vocab/{os.path.basename(xz)}"
        else:
            info["committed"] = None
            info["left_in"] = args.vocab_out
        # Tokenizer cases on the real vocabulary: tokenizer.json (tokenizers) vs llama.cpp.
        from tokenizers import Tokenizer
        raw = Tokenizer.from_file(os.path.join(src, "tokenizer.json"))
        specials = (["<|begin_of_text|>Hi<|eot_id|>", "<|start_header_id|>user<|end_header_id|>\n\nHi"]
                    if name == "llama3" else SPECIAL_CASES["qwen"])
        cases = []
        for t in TOKENIZER_CASES + specials:
            c = dict(text=t, ids_tokenizer_json=raw.encode(t, add_special_tokens=False).ids,
                     ids_llamacpp=llamacpp_ids(args.llama_bin, out, t, True))
            c["agree"] = c["ids_llamacpp"] == c["ids_tokenizer_json"]
            cases.append(c)
        os.makedirs(os.path.join(args.out, "vocab"), exist_ok=True)
        with open(os.path.join(args.out, "vocab", f"{name}_tokenizer_cases.json"), "w",
                  encoding="utf-8") as f:
            json.dump(dict(tokenizer=f"tests/fixtures/shared/tokenizers/{name}.tar.xz "
                                     f"({name}/tokenizer.json)",
                           gguf=f"vocab/{name}-vocab.gguf.xz", add_special_tokens=False,
                           llamacpp_command="llama-tokenize -m GGUF --ids --no-bos --log-disable -p TEXT",
                           cases=cases), f, ensure_ascii=False, indent=1)
            f.write("\n")
        info["tokenizer_cases"] = f"vocab/{name}_tokenizer_cases.json"
        info["tokenizer_cases_agree"] = sum(c["agree"] for c in cases)
        info["tokenizer_cases_total"] = len(cases)
        res[name] = info
    manifest["vocab_only"] = res


def build_stories(args, manifest):
    probe = os.path.join(args.work, "probe")
    inc = [os.path.join(args.llama_cpp, "include"), os.path.join(args.llama_cpp, "ggml", "include")]
    run(["cc", "-O1", "-o", probe, os.path.join(TOOLS, "gguf_fixtures_probe.c")]
        + [f"-I{i}" for i in inc]
        + [f"-L{args.llama_bin}", "-lllama", "-lggml", "-lggml-base",
           f"-Wl,-rpath,{args.llama_bin}"])
    runs = []
    for i, (prompt, n_gen) in enumerate((("", 64), ("Once upon a time", 16))):
        fn = f"stories260K_llamacpp_logits_{i}.bin"
        r = run([probe, STORIES, prompt, str(n_gen), os.path.join(args.out, fn)],
                capture_output=True, text=True)
        o = json.loads(r.stdout)
        o["text"] = "".join(o["generated_pieces"])
        o["logits"] = fn
        o["command"] = (f"probe tests/fixtures/shared/models/stories260K.gguf "
                        f"{json.dumps(prompt)} {n_gen} {fn}")
        runs.append(o)
    simple = subprocess.run([os.path.join(args.llama_bin, "llama-simple"), "-m", STORIES,
                             "-n", "64", ""], capture_output=True, text=True, check=True).stdout
    doc = dict(model="tests/fixtures/shared/models/stories260K.gguf",
               model_sha256=sha256(STORIES),
               llama_cpp_commit=manifest["versions"]["llama.cpp"],
               decoding="greedy: argmax of llama.cpp's logits (lowest id on ties), one token per "
                        "llama_decode, prompt tokenized by llama.cpp with add_special=1 "
                        "(BOS first), parse_special=0, n_ctx 512, 1 thread, CPU",
               probe_source="tools/gguf_fixtures_probe.c",
               logits_format="int32 n_tokens, int32 n_vocab, then n_tokens*n_vocab float32 "
                             "(little-endian, row-major): one row per prompt position",
               runs=runs,
               llama_simple_cross_check=dict(
                   command="llama-simple -m stories260K.gguf -n 64 ''",
                   stdout=simple))
    with open(os.path.join(args.out, "stories260K_llamacpp.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")


# --------------------------------------------------------------------------- #


def versions(args):
    import numpy
    import safetensors
    import sentencepiece
    import tokenizers
    import torch
    import transformers
    import gguf
    commit = subprocess.run(["git", "-C", args.llama_cpp, "rev-parse", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    return {"transformers": transformers.__version__, "torch": torch.__version__,
            "tokenizers": tokenizers.__version__, "sentencepiece": sentencepiece.__version__,
            "safetensors": safetensors.__version__, "numpy": numpy.__version__,
            "gguf-py": os.path.relpath(os.path.dirname(gguf.__file__), args.llama_cpp)
            if gguf.__file__.startswith(os.path.abspath(args.llama_cpp)) else gguf.__file__,
            "llama.cpp": commit}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--convert-wrapper":
        return convert_wrapper(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp source tree (convert script, gguf-py)")
    ap.add_argument("--llama-bin", help="llama.cpp binaries (default LLAMA_CPP/build/bin)")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--work", default="/tmp/gguf-work", help="scratch directory")
    ap.add_argument("--vocab-out", default="/work/gguf-vocab",
                    help="where the real-vocabulary GGUFs are written")
    ap.add_argument("--only", help="comma list of steps: llama,qwen2,qwen3,vocab,stories")
    args = ap.parse_args(argv)
    args.llama_cpp = os.path.abspath(args.llama_cpp)
    args.llama_bin = os.path.abspath(args.llama_bin or os.path.join(args.llama_cpp, "build", "bin"))
    args.out = os.path.abspath(args.out)
    args.work = os.path.abspath(args.work)
    args.vocab_out = os.path.abspath(args.vocab_out)
    steps = set((args.only or "llama,qwen2,qwen3,vocab,stories").split(","))

    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    sys.path.insert(0, os.path.join(args.llama_cpp, "gguf-py"))
    sys.path.insert(0, TOOLS)
    import torch
    import transformers
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()

    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.work, exist_ok=True)
    for n in ("qwen3", "llama3"):
        extract_tar(os.path.join(SHARED, "tokenizers", f"{n}.tar.xz"), os.path.join(args.work, "tok"))

    mpath = os.path.join(args.out, "manifest.json")
    manifest = json.load(open(mpath)) if os.path.exists(mpath) else {}
    manifest.setdefault("fixtures", {})
    manifest["generator"] = "tools/gen_gguf_fixtures.py"
    manifest["versions"] = versions(args)
    for spec in fixture_specs():
        if spec["name"] in steps:
            build_fixture(spec, args, manifest)
    if "vocab" in steps:
        build_vocab_ggufs(args, manifest)
    if "stories" in steps:
        build_stories(args, manifest)
    with open(mpath, "w", encoding="utf-8") as f:
        json.dump(manifest, f, ensure_ascii=False, indent=1, sort_keys=True)
        f.write("\n")
    total = 0
    for root, _d, files in os.walk(args.out):
        for fn in files:
            total += os.path.getsize(os.path.join(root, fn))
    print(f"{args.out}: {total} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
