#!/usr/bin/env python3
"""Build the DFlash training / held-out prompt sets from text shipped by two Debian packages
(stdlib only; runs on the development machine, not the GPU machine).

Sources (Debian bookworm, fetched with `apt-get download`, unpacked with `dpkg-deb -x`):
  fortunes-min 1:1.99.1-7.3  /usr/share/games/fortunes/{fortunes,literature,riddles}
                             BSD licence (fortune-mod, Regents of the University of California;
                             see train/data/sources/fortunes-min.copyright)
  wamerican 2020.12.07-2     /usr/share/dict/american-english (SCOWL word list, permissive
                             notice of Kevin Atkinson et al.; train/data/sources/wamerican.copyright)

Every prompt is an instruction built from a template and one source item (a fortune / quotation /
riddle text, or one to three dictionary words), e.g. "Explain the meaning of this saying: …",
"Continue this text: …", "Write a short story about a lighthouse and a violin.". Deterministic:
the same package files and --seed give the same JSONL, byte for byte.

    python3 train/build_prompts.py                 # fetch the packages into train/work/debs if
                                                   # needed, write train/data/prompts_{train,heldout}.jsonl
    python3 train/build_prompts.py --check         # unit checks of the parsing/templating + the
                                                   # committed files' shape (no package needed)
    python3 train/build_prompts.py --root DIR      # use an already unpacked tree (DIR/usr/share/...)

Output lines: {"id": "train-00000", "prompt": "...", "source": "fortunes:123", "kind": "explain"}.
"""
import argparse
import glob
import gzip
import hashlib
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
PACKAGES = ["fortunes-min", "wamerican"]
FORTUNE_FILES = ["fortunes", "literature", "riddles"]
MAX_TEXT_CHARS = 400        # longer fortunes are skipped (prompts stay short)
MAX_PROMPT_CHARS = 520

TEXT_TEMPLATES = [  # (kind, template) with {text}
    ("explain", "Explain the meaning of this saying:\n\n{text}"),
    ("explain", "What does this quote mean? Explain it in simple words.\n\n\"{text}\""),
    ("continue", "Continue this text with a few more sentences:\n\n{text}"),
    ("summarize", "Summarize the following text in one sentence:\n\n{text}"),
    ("rewrite", "Rewrite this in plain modern English:\n\n{text}"),
    ("story", "Write a short story inspired by this line: \"{text}\""),
    ("opinion", "Do you agree with this statement? Give two reasons.\n\n{text}"),
    ("answer", "Answer or respond to this:\n\n{text}"),
    ("poem", "Write a short poem based on this idea: {text}"),
    ("translate", "Explain this to a ten-year-old:\n\n{text}"),
]
WORD_TEMPLATES = [  # (kind, template, number of words)
    ("define", "What does the word \"{w0}\" mean? Give an example sentence.", 1),
    ("explain", "Explain what {w0} is.", 1),
    ("explain", "Tell me three interesting facts about {w0}.", 1),
    ("sentence", "Write a sentence that uses the words \"{w0}\" and \"{w1}\".", 2),
    ("story", "Write a short story about {w0} and {w1}.", 2),
    ("poem", "Write a short poem about {w0}.", 1),
    ("list", "List five things that are related to {w0}.", 1),
    ("compare", "What is the difference between {w0} and {w1}?", 2),
    ("email", "Write a short email to a friend about {w0}.", 1),
    ("howto", "Give step-by-step instructions for something involving {w0}.", 1),
    ("story", "Write a paragraph that mentions {w0}, {w1} and {w2}.", 3),
    ("explain", "Why might someone be interested in {w0}? Answer in a few sentences.", 1),
]
ARITH_TEMPLATES = [
    "What is {a} + {b}?", "What is {a} times {b}? Show your work.", "Is {a} a prime number? Explain.",
    "Write a Python function that returns the sum of the numbers from 1 to {a}.",
]


def parse_fortunes(text):
    """Entries of a strfile source: separated by lines holding only '%'; whitespace normalised
    within lines, line breaks kept, empty entries dropped."""
    out = []
    for entry in re.split(r"^%[ \t]*$", text.replace("\r\n", "\n"), flags=re.M):
        lines = [" ".join(line.split()) for line in entry.strip("\n").split("\n")]
        t = "\n".join(lines).strip()
        t = re.sub(r"\n{3,}", "\n\n", t)
        if t:
            out.append(t)
    return out


def usable_text(t):
    return 12 <= len(t) <= MAX_TEXT_CHARS and t.isascii() and "\t" not in t


def usable_word(w):
    """Plain lowercase dictionary words, no possessives or proper names."""
    return re.fullmatch(r"[a-z]{4,14}", w) is not None


def fetch_packages(work):
    """apt-get download + dpkg-deb -x into work/; returns the unpacked root."""
    debs, root = os.path.join(work, "debs"), os.path.join(work, "root")
    os.makedirs(debs, exist_ok=True)
    for pkg in PACKAGES:
        if not glob.glob(os.path.join(debs, f"{pkg}_*.deb")):
            subprocess.run(["apt-get", "download", pkg], cwd=debs, check=True)
    if os.path.isdir(root):
        shutil.rmtree(root)
    os.makedirs(root)
    for deb in sorted(glob.glob(os.path.join(debs, "*.deb"))):
        subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
    return root, sorted(glob.glob(os.path.join(debs, "*.deb")))


def load_sources(root):
    texts = []
    for name in FORTUNE_FILES:
        path = os.path.join(root, "usr/share/games/fortunes", name)
        with open(path, encoding="latin-1") as f:
            for i, t in enumerate(parse_fortunes(f.read())):
                if usable_text(t):
                    texts.append((f"{name}:{i}", t))
    with open(os.path.join(root, "usr/share/dict/american-english"), encoding="utf-8") as f:
        words = sorted({w.strip() for w in f if usable_word(w.strip())})
    return texts, words


def make_prompts(texts, words, n, rng, text_share=0.45, arith_share=0.05, exclude=()):
    """n prompts: text templates over `texts` (each text used at most once per call while
    possible), word templates over `words`, a few arithmetic/code ones."""
    out, pool, seen = [], list(texts), set(exclude)
    rng.shuffle(pool)
    while len(out) < n:
        r = rng.random()
        if r < text_share and pool:
            src, t = pool.pop()
            kind, tpl = rng.choice(TEXT_TEMPLATES)
            prompt = tpl.format(text=t)
        elif text_share <= r < text_share + arith_share:
            a, b = rng.randint(2, 999), rng.randint(2, 99)
            tpl = rng.choice(ARITH_TEMPLATES)
            kind, src, prompt = "arith", f"arith:{a},{b}", tpl.format(a=a, b=b)
        else:
            kind, tpl, k = rng.choice(WORD_TEMPLATES)
            ws = rng.sample(words, k)
            src = "words:" + ",".join(ws)
            prompt = tpl.format(**{f"w{i}": w for i, w in enumerate(ws)})
        if len(prompt) > MAX_PROMPT_CHARS:
            prompt = prompt[:MAX_PROMPT_CHARS]
        if prompt in seen:  # no duplicates, none of `exclude`
            continue
        seen.add(prompt)
        out.append({"prompt": prompt, "source": src, "kind": kind})
    return out


def build(root, n_train, n_heldout, seed):
    texts, words = load_sources(root)
    rng = random.Random(seed)
    # Held-out prompts use texts and words that no training prompt uses.
    rng.shuffle(texts)
    rng.shuffle(words)
    ht = max(1, len(texts) // 10)
    hw = max(10, len(words) // 10)
    heldout = make_prompts(texts[:ht], words[:hw], n_heldout, random.Random(seed + 1))
    train = make_prompts(texts[ht:], words[hw:], n_train, random.Random(seed + 2),
                         exclude={p["prompt"] for p in heldout})
    for i, p in enumerate(train):
        p["id"] = f"train-{i:05d}"
    for i, p in enumerate(heldout):
        p["id"] = f"heldout-{i:04d}"
    return train, heldout, len(texts), len(words)


def write_jsonl(path, rows):
    # mtime 0: a gzipped set is byte for byte the same on every run, like the plain one
    with (gzip.GzipFile(path, "wb", mtime=0) if path.endswith(".gz") else open(path, "wb")) as raw, \
            io.TextIOWrapper(raw, encoding="utf-8", newline="\n") as f:
        for r in rows:
            f.write(json.dumps({"id": r["id"], "prompt": r["prompt"], "source": r["source"], "kind": r["kind"]},
                               ensure_ascii=False) + "\n")


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def check():
    """Unit checks of the pure parts, and of the committed files when present."""
    e = parse_fortunes("A  b\n%\n\n%\nline one\n  line   two\n%\n")
    assert e == ["A b", "line one\nline two"], e
    assert usable_word("lighthouse") and not usable_word("Paris") and not usable_word("cat's")
    assert not usable_text("short") and usable_text("A long enough fortune text.")
    texts = [(f"t:{i}", f"Text number {i} is here.") for i in range(50)]
    words = [f"word{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
    a = make_prompts(texts, words, 100, random.Random(7))
    b = make_prompts(texts, words, 100, random.Random(7))
    assert a == b, "not deterministic"
    assert len(a) == 100 and all(p["prompt"] and len(p["prompt"]) <= MAX_PROMPT_CHARS for p in a)
    used = [p["source"] for p in a if p["source"].startswith("t:")]
    assert len(used) == len(set(used)), "a text used twice"
    c = make_prompts(texts, words, 100, random.Random(8), exclude={p["prompt"] for p in a})
    assert not {p["prompt"] for p in c} & {p["prompt"] for p in a}, "exclude ignored"
    ok = True
    for name, n_min in (("prompts_train.jsonl", 1000), ("prompts_heldout.jsonl", 100)):
        path = os.path.join(DATA, name)
        if not os.path.exists(path):
            print(f"check: {path} not built yet")
            continue
        rows = read_jsonl(path)
        ids = [r["id"] for r in rows]
        good = len(rows) >= n_min and len(set(ids)) == len(ids) and all(r["prompt"].strip() for r in rows)
        print(f"check: {name}: {len(rows)} prompts, {os.path.getsize(path)} bytes", "ok" if good else "BAD")
        ok &= good
    tr, ho = os.path.join(DATA, "prompts_train.jsonl"), os.path.join(DATA, "prompts_heldout.jsonl")
    if os.path.exists(tr) and os.path.exists(ho):
        overlap = {r["prompt"] for r in read_jsonl(tr)} & {r["prompt"] for r in read_jsonl(ho)}
        print(f"check: train/held-out identical prompts: {len(overlap)}")
        ok &= len(overlap) == 0
    print("check", "ok" if ok else "FAILED")
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="unit checks only")
    p.add_argument("--root", help="an unpacked tree holding usr/share/games/fortunes and usr/share/dict")
    p.add_argument("--work", default=os.path.join(HERE, "work"))
    p.add_argument("--train", type=int, default=20000)
    p.add_argument("--heldout", type=int, default=200)
    p.add_argument("--seed", type=int, default=20260206)
    p.add_argument("--out-train", help="write only the training prompts, to this file (a bigger set "
                   "for the GPU machine; train/data stays as it is)")
    a = p.parse_args()
    if a.check:
        sys.exit(check())
    debs = []
    root = a.root
    if not root:
        root, debs = fetch_packages(a.work)
    train, heldout, n_texts, n_words = build(root, a.train, a.heldout, a.seed)
    if a.out_train:
        write_jsonl(a.out_train, train)
        print(f"wrote {len(train)} training prompts to {a.out_train} ({os.path.getsize(a.out_train)} bytes)")
        return
    os.makedirs(os.path.join(DATA, "sources"), exist_ok=True)
    write_jsonl(os.path.join(DATA, "prompts_train.jsonl"), train)
    write_jsonl(os.path.join(DATA, "prompts_heldout.jsonl"), heldout)
    for pkg in PACKAGES:
        src = os.path.join(root, "usr/share/doc", pkg, "copyright")
        shutil.copy(src, os.path.join(DATA, "sources", f"{pkg}.copyright"))
    manifest = {
        "generator": "train/build_prompts.py", "seed": a.seed, "train": len(train), "heldout": len(heldout),
        "usable_texts": n_texts, "usable_words": n_words,
        "packages": {os.path.basename(d): sha256(d) for d in debs},
        "files": {n: sha256(os.path.join(DATA, n)) for n in ("prompts_train.jsonl", "prompts_heldout.jsonl")},
    }
    with open(os.path.join(DATA, "prompts_manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    print(json.dumps(manifest, indent=2))
    sys.exit(check())


if __name__ == "__main__":
    main()
