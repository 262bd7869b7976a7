#!/usr/bin/env python3
"""Golden token ids for tessera's tokenizer tests, produced by Hugging Face `tokenizers`.

Writes under tests/fixtures/tok/:
  corpus.json          the test strings (many scripts, emoji, code, numbers, whitespace, ...)
  smol/tokenizer.json  a SmolLM2-style byte-level BPE (ByteLevel use_regex, 2000 tokens) trained
                       here on the corpus and the random strings
  golden.json          {tokenizer: [{text, ids, rt[, random]}]} for the corpus and 400 seeded
                       random strings of tricky characters; rt = HF decode(encode(text)) == text.
                       Tokenizers: smol, smol_prefix (ByteLevel add_prefix_space on), smol_flags
                       (NFKC + lstrip/rstrip/single_word/normalized added tokens; corpus only),
                       smol_digits / smol_digit_runs (a Digits pre-tokenizer first),
                       llama3, qwen3 (from --shared). tests/test_tok.c makes the same edits.
  split.json           HF Split pre-tokenizer pieces for every behaviour, with and without invert

Run: /work/venv-hf/bin/python tools/gen_tok_fixtures.py [--shared ../shared]
"""
import argparse
import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "tests", "fixtures", "tok")

PARAGRAPH = (
    "The quick brown fox jumps over the lazy dog. In 1997, researchers at the lab measured "
    "3.14159 radians and 2,718,281 events; they didn't expect it. \"Tokenizers\" split text into "
    "pieces — sometimes oddly: e.g. naïve café déjà-vu, Straße, and ÆØÅ. Meanwhile, the numbers "
    "12, 123, 1234, 12345 and 123456789012 behave differently per model.\n\nA second paragraph "
    "follows, with tabs\tand  double  spaces, URLs like https://example.com/a?b=c&d=e#frag, "
    "e-mail foo.bar@example.org, and a path /usr/local/lib/libfoo.so.1. It ends here."
)


def corpus():
    c = [
        "", " ", "  ", "a", "A", "é", "\n", "\t", "0", "!", "'", "ab", "Hello", "hello world",
        "Hello, world!", " leading space", "trailing space ", "   three leading",
        # Latin with accents, precomposed vs combining (NFC matters for Qwen)
        "café", "cafe\u0301", "é vs e\u0301", "naïve résumé façade", "Ångström", "A\u030angstro\u0308m",
        "Straße größer", "Ça va? Très bien.", "ñandú pingüino", "Łódź Kraków Gdańsk", "Dvořák",
        "\u1e9b\u0323", "Å (U+212B) vs Å", "ﬁ ligature ﬀ", "Ǆ ǅ ǆ",
        # other scripts
        "Привет, как дела?", "Съешь же ещё этих мягких французских булок",
        "Γειά σου Κόσμε", "ΑΒΓΔ αβγδ ς σ", "مرحبا بالعالم", "السلام عليكم ورحمة الله",
        "שלום עולם", "עִבְרִית", "नमस्ते दुनिया", "हिन्दी भाषा", "สวัสดีชาวโลก", "ภาษาไทย",
        "你好，世界", "中文分词测试。", "我爱北京天安门", "안녕하세요 세계", "한국어 텍스트",
        "こんにちは世界", "カタカナとひらがな", "ｶﾀｶﾅ ﾊﾝｶｸ", "日本語の文章です。", "ქართული", "Հայերեն",
        "ᚠᛇᚻ runes", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙", "ⅷ Ⅻ ½ ¾ ²³", "٣٤٥ ٠١٢", "१२३ ४५६",
        # emoji
        "😀", "😀😃😄", "👍🏽", "👨‍👩‍👧‍👦", "👩🏾‍💻", "🏳️‍🌈", "🇺🇸🇯🇵🇩🇪", "❤️", "I ❤️ NY 🗽",
        "emoji in text 🎉🎉 yes", "🧑🏻‍🤝‍🧑🏿", "#️⃣ 1️⃣",
        # code
        "int main(void) {\n    return 0;\n}\n",
        "#include <stdio.h>\nint main() { printf(\"%d\\n\", 42); }",
        "def f(x):\n    if x > 0:\n        return x * 2\n    return -x\n",
        "class Foo:\n\tdef __init__(self):\n\t\tself.x = [1, 2, 3]\n",
        "for (int i = 0; i < n; ++i) a[i] += b[i] >> 2;",
        "x = {'a': 1, \"b\": [2, 3]}  # comment",
        "SELECT * FROM users WHERE id = 7;",
        "<div class=\"x\">&amp; &lt;</div>",
        "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
        "$ ls -la | grep '^d' && echo done",
        "    indented four\n        indented eight",
        # numbers
        "1", "12", "123", "1234", "12345", "123456", "1234567", "12345678", "123456789",
        "1234567890", "12345678901", "123456789012", "1234567890123", "12345678901234",
        "123456789012345", "1234567890123456", "12345678901234567", "123456789012345678",
        "1234567890123456789", "12345678901234567890", "3.14159", "0.5", "-42", "+7",
        "1,000,000", "1.000.000,50", "1 000 000", "1e10", "6.022e23", "0x1F", "v1.2.3",
        "2024-01-15", "12:30:45", "$1,234.56", "50%", "a1b2c3", "abc123def456",
        # whitespace
        "a  b", "a   b", "a    b", "a\tb", "a\t\tb", "a\nb", "a\n\nb", "a\n\n\nb", "a\r\nb",
        "a\r\n\r\nb", "\n\n\n", "   ", "\t\t", " \n ", "line1\nline2\n", "end with newline\n",
        "trailing spaces   ", "  \n  x", "a \u00a0b", "a\u3000b", "a\u2009b", "x\u200by",
        "\u2028sep\u2029", "a\x0bb\x0cc", "a\x85b",
        # contractions and case
        "don't", "DON'T", "I'M", "she'LL", "we'VE", "they'Re", "it's", "IT'S", "you'd", "YOU'D",
        "'s'S't'T", "O'Neil's", "rock 'n' roll", "'''", "l'amour", "Ain't", "'ſ",
        "Hello World HELLO world hElLo", "CamelCaseIdentifier", "snake_case_name",
        # punctuation
        "...", "?!?!", "--", "—", "«quoted»", "“smart quotes”", "(parenthesis)", "[a]{b}<c>",
        "@user #tag", "a/b\\c", "~`^", "!!!\n\n", ".\n", "?\r\n",
        # special-token strings inside text
        "<|im_start|>user\nhi<|im_end|>",
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
        "<|begin_of_text|><|eot_id|>",
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>",
        "text<|endoftext|>more", "<|endoftext|>", "<|end_of_text|>", " <|im_end|> ",
        "<think>\nreasoning\n</think>\n\nanswer", "<tool_call>{}</tool_call>",
        "<|im_start|><|im_start|>", "<|im_sta", "<|eot_id|x", "<s>not special</s>",
        "<|reserved_special_token_5|>", "a<|im_end|>b<|eot_id|>c",
        # around added tokens: the smol_flags variant sets lstrip / rstrip / single_word
        "x <|im_start|> y", "x  \t<|im_start|>y", "x<|endoftext|>y", "x <|endoftext|> y",
        "<|endoftext|>y", "é<|endoftext|>", "_<|endoftext|>", "😀<|endoftext|>", "—<|endoftext|>—",
        "中<|endoftext|>", "1<|endoftext|>", "\u00a0<|endoftext|>\u0663", "\u093f<|endoftext|>",
        "\u0301<|endoftext|>", "\u2460<|endoftext|>\u216b", "\u00bd<|endoftext|>\u203f",
        "\u200d<|endoftext|>\u20dd", "\u02b0<|endoftext|>", "\u00b2<|endoftext|>\u00b2",
        "x\u3000<|im_start|>", "x\u00a0 <|im_start|>", "x\u180e<|im_start|>", "<|im_end|>\u2028y",
        "<|im_end|>\u200by", "<|im_end|>\u0085\u2003y", "<|im_end|>\n\nnext", "a<|im_end|>  b",
        " \t<|im_start|>\t <|im_end|> ",
        # full-width spellings: NFKC turns them into the tokens (smol_flags normalizes)
        "x \uff1c\uff5cendoftext\uff5c\uff1e y", "\uff1c\uff5cim_end\uff5c\uff1e", "\uff21\uff22\uff23 \u2460",
        # misc
        "https://huggingface.co/docs", "user@example.com", "C:\\Windows\\System32",
        "ａｂｃ fullwidth", "Zalgo: Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇", "\u00ad soft hyphen",
        "\ufeffBOM", "\u0000nul", "tab\there", "mixed 中文 and English 123",
        "Русский text with English", "a" * 100, " " * 40, "\n" * 10, "ab" * 60,
        "9" * 50, "!" * 30, "😀" * 10, "é" * 20,
        PARAGRAPH,
    ]
    seen, out = set(), []
    for s in c:
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


# Characters where regex engines, Unicode tables or BPE edge cases could disagree: unusual
# white space (Oniguruma's \s vs PCRE2's), apostrophes next to case-folding letters (ſ, K),
# digits and numerals of other scripts, combining marks, joiners, emoji parts, CJK.
TRICKY = (list("aAzZ09 _-.,;:!?'\"()[]{}<>/\\@#$%^&*+=|~`") +
          ["s", "S", "t", "T", "re", "VE", "ll", "M", "d", "\n", "\r", "\t", "\x0b", "\x0c",
           "\u00a0", "\u1680", "\u2000", "\u2007", "\u200a", "\u2028", "\u2029", "\u202f",
           "\u205f", "\u3000", "\u0085", "\u180e", "\u200b", "\u200d", "\ufeff", "\u00ad",
           "\u017f", "\u212a", "\u0130", "\u0131", "\u00df", "\u1e9e", "\u0301", "\u0308",
           "\u0323", "\u093f", "\u0e31", "\u0663", "\u0aeb", "\u216b", "\u00b2", "\u00bd",
           "\u2460", "\U0001d7d8", "\u00e9", "\u00c5", "\u212b", "\u1100", "\u1161", "\uac00",
           "\u4e2d", "\u6587", "\u3042", "\u30ab", "\uff76", "\U0001f600", "\U0001f3fd",
           "\U0001f1fa", "\U0001f1f8", "\u2764", "\ufe0f", "\u20e3", "\u05d0", "\u0627",
           "\u0416", "\u03a3", "\u03c2", "\U00010348", "\U000e0067", "\ud7a3", "<|im_end|>",
           "<|eot_id|>", "<|endoftext|>", "   ", "\n\n", "\r\n", "123", "4567",
           # letters and digits newer than Unicode 14 (in Oniguruma's tables, not PCRE2 10.42's)
           "\u1c89", "\ua7cb", "\U000105c0", "\U00016100", "\U0001e5d0", "\U00031350",
           "\U00010d40", "\U0001e5f1", "\U0001ccf0"])


def random_strings(n=400, seed=1234):
    import random
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, 24)
        out.append("".join(rng.choice(TRICKY) for _ in range(k)))
    return out


def train_smol(texts):
    """A SmolLM2-style tokenizer: byte-level BPE, GPT-2 regex via ByteLevel(use_regex=True)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=2000, min_frequency=1, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts * 3, trainer=trainer)
    return tok


def goldens(tok, texts, extra):
    """Rows for the corpus, then for the random strings (flagged "random")."""
    rows = []
    for t in texts + extra:
        ids = tok.encode(t, add_special_tokens=False).ids
        rt = tok.decode(ids, skip_special_tokens=False) == t
        row = {"text": t, "ids": ids, "rt": rt}
        if t in extra and t not in texts:
            row["random"] = True
        rows.append(row)
    return rows


def split_cases():
    texts = ["Hello, world! How are you?", "a1b22c333", "  two  spaces ", "x", "", "...end",
             "foo!!,,  boo??", "ooo"]
    pats = [r"\s+", r"[,!?]", r"\d+", r"\d", r"o", r"\s*"]
    rows = []
    for p in pats:
        for beh in ["removed", "isolated", "merged_with_previous", "merged_with_next",
                    "contiguous"]:
            for inv in [False, True]:
                pt = pre_tokenizers.Split(Regex(p), beh, invert=inv)
                for t in texts:
                    pieces = [s for s, _ in pt.pre_tokenize_str(t)]
                    rows.append({"pattern": p, "behavior": beh, "invert": inv, "text": t,
                                 "pieces": pieces})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    args = ap.parse_args()
    os.makedirs(os.path.join(OUT, "smol"), exist_ok=True)
    texts = corpus()
    with open(os.path.join(OUT, "corpus.json"), "w", encoding="utf-8") as f:
        json.dump(texts, f, ensure_ascii=False, indent=0)

    extra = random_strings()
    smol = train_smol(texts + extra)  # the random strings push the vocabulary to 2000
    smol_path = os.path.join(OUT, "smol", "tokenizer.json")
    smol.save(smol_path)
    # The same vocabulary with add_prefix_space on: the C test derives this file by the same
    # one-field edit, so ByteLevel's prefix space is checked without committing a second copy.
    with open(smol_path, encoding="utf-8") as f:
        js = json.load(f)
    js["pre_tokenizer"]["add_prefix_space"] = True
    smol_prefix = Tokenizer.from_str(json.dumps(js))

    # And with the added-token flags HF honours when matching (lstrip, rstrip, single_word,
    # normalized) under an NFKC normalizer: the C test makes the same edits.
    with open(smol_path, encoding="utf-8") as f:
        js = json.load(f)
    for a in js["added_tokens"]:
        if a["content"] == "<|im_start|>":
            a["lstrip"] = True
        if a["content"] == "<|im_end|>":
            a["rstrip"] = True
        if a["content"] == "<|endoftext|>":
            a["single_word"] = True
            a["normalized"] = True
    js["normalizer"] = {"type": "NFKC"}
    smol_flags = Tokenizer.from_str(json.dumps(js))
    # And with a Digits pre-tokenizer before ByteLevel (StarCoder/SmolLM-style files), once
    # with individual digits and once with runs.
    digits = {}
    for each in (True, False):
        with open(smol_path, encoding="utf-8") as f:
            js = json.load(f)
        js["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": each}, js["pre_tokenizer"]]}
        digits[each] = Tokenizer.from_str(json.dumps(js))
    gold = {"smol": goldens(smol, texts, extra), "smol_prefix": goldens(smol_prefix, texts, extra),
            "smol_flags": goldens(smol_flags, texts, []),
            "smol_digits": goldens(digits[True], texts, extra),
            "smol_digit_runs": goldens(digits[False], texts, [])}
    for name in ["llama3", "qwen3"]:
        p = os.path.join(args.shared, "tokenizers", name, "tokenizer.json")
        gold[name] = goldens(Tokenizer.from_file(p), texts, extra)
    with open(os.path.join(OUT, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(gold, f, ensure_ascii=False, separators=(",", ":"))
    with open(os.path.join(OUT, "split.json"), "w", encoding="utf-8") as f:
        json.dump(split_cases(), f, ensure_ascii=False, separators=(",", ":"))
    for k, v in gold.items():
        print(f"{k}: {len(v)} strings, {sum(len(r['ids']) for r in v)} ids, "
              f"{sum(r['rt'] for r in v)} round-trip in HF")


if __name__ == "__main__":
    main()
