"""eval_prepro.py: HellaSwag and LAMBADA (raw files) -> the compact token files the trainer evaluates.

  python3 dev/data/eval_prepro.py                  # reads ../shared/data/eval, writes data/eval/*.bin (seconds)
  python3 dev/data/eval_prepro.py --verify         # re-reads the written files and checks them

Inputs (--eval_dir, default ../shared/data/eval next to the repository; README there):
  hellaswag_val_full.txt.xz   10,042 items of 6 lines: "activity label: context", the index (0-3) of
                              the correct ending, then the 4 endings
  lambada_test.jsonl          5,153 passages {"text": ...}; the task is the passage's last word
Outputs (--out_dir, default data/eval): hellaswag_val.bin and lambada_test.bin.
Where the raw files come from, and their licences: data/README.md. Expected failures (a missing package,
file or folder) end in one line "error: ..." on stderr and exit status 1.

Every item is a context and one or more candidate continuations, already in GPT-2 tokens, so the C
side never tokenizes (llmc/run/eval_tasks.h reads them; scripts/eval_hf.py reads them through read_eval_file
below, so that the trainer and the Hugging Face evaluation score exactly the same token sequences):
  HellaSwag: context = the first line as given; candidate k = " " + ending k (tokenized on its own,
             as llm.c and lm-eval do); label = the correct ending.
  LAMBADA:   context = the passage up to its last space; one candidate = " " + the last word (lm-eval's
             lambada_openai split); label 0.

File format (little-endian):
  int32 header[256]: [0] magic 20261205, [1] version 1, [2] kind (1: multiple choice, scored by the
      lowest mean per-token loss; 2: last word, scored by greedy match and summed loss), [3] items,
      [4] uint16 values in the item stream, [5] longest item (context + longest candidate, tokens),
      [6] longest candidate, [7] vocabulary size the tokens are below (50257), [8] CRC32 of the item
      stream (zlib's), [9] most candidates of an item; the rest 0
  uint16 item stream, per item: context length n, candidates k, label, the k candidate lengths,
      then the n context tokens, then each candidate's tokens in order
"""
import argparse
import lzma
import os
import sys
import zlib

try:
    import numpy as np
except ImportError:
    print(f"error: {os.path.basename(sys.argv[0]) or 'eval_prepro.py'} needs numpy: "
          f"python3 -m pip install -r requirements.txt", file=sys.stderr)
    sys.exit(1)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EVAL_MAGIC, EVAL_VERSION = 20261205, 1
KIND_CHOICE, KIND_LASTWORD = 1, 2
HEADER_INTS = 256
VOCAB = 50257


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


# ------------------------------------------------------------------------------------------------
# the raw files -> items (context text, candidate texts, label)

def hellaswag_items(path):
    try:
        with lzma.open(path, "rt", encoding="utf-8") as f:
            lines = f.read().split("\n")
    except (lzma.LZMAError, EOFError) as e:
        die(f"{path}: not a readable .xz file ({e or 'truncated'})")
    except UnicodeDecodeError:
        die(f"{path}: not UTF-8 text")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) % 6:
        die(f"{path}: {len(lines)} lines, not a multiple of 6 (context, label, 4 endings per item)")
    items = []
    for i in range(0, len(lines), 6):
        ctx, label, endings = lines[i], lines[i + 1], lines[i + 2:i + 6]
        if label not in ("0", "1", "2", "3"):
            die(f"{path}:{i + 2}: label '{label}' is not 0-3")
        items.append((ctx, [" " + e for e in endings], int(label)))
    return items


def lambada_items(path):
    from prepro import jsonl_texts   # the JSONL reader prepro.py uses (main() puts dev/data on the path)
    items = []
    for lineno, text in jsonl_texts(path):
        if " " not in text:
            die(f"{path}:{lineno}: a passage without a space has no last word to predict")
        ctx, word = text.rsplit(" ", 1)
        items.append((ctx, [" " + word], 0))
    return items


# ------------------------------------------------------------------------------------------------
# the token file

def encode_items(enc, items):
    """[(context tokens, [candidate tokens...], label)]"""
    ctxs = enc.encode_ordinary_batch([c for c, _, _ in items])
    flat = enc.encode_ordinary_batch([e for _, ends, _ in items for e in ends])
    out, k = [], 0
    for (ctx, ends, label), ct in zip(items, ctxs):
        out.append((ct, flat[k:k + len(ends)], label))
        k += len(ends)
    return out


def write_eval_file(path, kind, items):
    stream = []
    longest = longest_cand = most = 0
    for ctx, cands, label in items:
        if not ctx or any(not c for c in cands) or not 0 <= label < len(cands):
            die(f"{path}: an item with an empty context or candidate, or a bad label")
        if len(ctx) > 65535 or any(len(c) > 65535 for c in cands):
            die(f"{path}: an item too long for uint16 lengths")
        stream += [len(ctx), len(cands), label] + [len(c) for c in cands] + list(ctx)
        for c in cands:
            stream += list(c)
        longest = max(longest, len(ctx) + max(len(c) for c in cands))
        longest_cand = max(longest_cand, max(len(c) for c in cands))
        most = max(most, len(cands))
    data = np.array(stream, dtype=np.uint16)
    if data.size > 2**31 - 1:
        die(f"{path}: the item stream is too long")
    header = np.zeros(HEADER_INTS, dtype=np.int32)
    header[:10] = [EVAL_MAGIC, EVAL_VERSION, kind, len(items), data.size, longest, longest_cand, VOCAB, 0, most]
    header[8] = np.array([zlib.crc32(data.tobytes())], dtype=np.uint32).view(np.int32)[0]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header.tobytes())
        f.write(data.tobytes())
    os.replace(tmp, path)
    return data.size


def read_eval_file(path):
    """-> (kind, [(context tokens, [candidate tokens...], label)]) with the checks the C reader makes."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 * HEADER_INTS:
        raise ValueError(f"{path}: shorter than the 1024-byte header")
    h = np.frombuffer(raw[:4 * HEADER_INTS], dtype=np.int32)
    if h[0] != EVAL_MAGIC or h[1] != EVAL_VERSION:
        raise ValueError(f"{path}: not an eval token file of version {EVAL_VERSION} (magic {h[0]}, version {h[1]})")
    data = np.frombuffer(raw[4 * HEADER_INTS:], dtype=np.uint16)
    if data.size != h[4]:
        raise ValueError(f"{path}: {data.size} stream values, the header says {h[4]}")
    if np.uint32(zlib.crc32(data.tobytes())) != np.array([h[8]], dtype=np.int32).view(np.uint32)[0]:
        raise ValueError(f"{path}: CRC32 of the item stream does not match the header")
    items, p = [], 0
    d = data.tolist()
    for _ in range(int(h[3])):
        n, k, label = d[p], d[p + 1], d[p + 2]
        lens = d[p + 3:p + 3 + k]
        p += 3 + k
        ctx = d[p:p + n]
        p += n
        cands = []
        for ln in lens:
            cands.append(d[p:p + ln])
            p += ln
        items.append((ctx, cands, label))
    if p != data.size:
        raise ValueError(f"{path}: the items end at value {p} of {data.size}")
    return int(h[2]), items


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--eval_dir", default=os.path.join(REPO, "..", "shared", "data", "eval"), help="the raw files (data/README.md: where they come from)")
    ap.add_argument("--out_dir", default=os.path.join(REPO, "data", "eval"))
    ap.add_argument("--bpe_dir", default=os.path.join(REPO, "data", "gpt2"), help="encoder.json and vocab.bpe")
    ap.add_argument("--verify", action="store_true", help="only re-read the written files and print their statistics")
    args = ap.parse_args()
    outputs = {"hellaswag": os.path.join(args.out_dir, "hellaswag_val.bin"),
               "lambada": os.path.join(args.out_dir, "lambada_test.bin")}
    if os.path.exists(args.out_dir) and not os.path.isdir(args.out_dir):
        die(f"--out_dir {args.out_dir} is not a directory")
    if not args.verify:
        sources = {"hellaswag": (os.path.join(args.eval_dir, "hellaswag_val_full.txt.xz"), hellaswag_items, KIND_CHOICE),
                   "lambada": (os.path.join(args.eval_dir, "lambada_test.jsonl"), lambada_items, KIND_LASTWORD)}
        if not os.path.isdir(args.eval_dir):
            die(f"--eval_dir {args.eval_dir} is not a directory; give the one holding hellaswag_val_full.txt.xz "
                f"and lambada_test.jsonl (data/README.md says where they come from)")
        for src, _, _ in sources.values():   # all checked before any output is written
            if not os.path.isfile(src):
                die(f"{src} not found; pass --eval_dir, the directory of hellaswag_val_full.txt.xz and "
                    f"lambada_test.jsonl (data/README.md says where they come from)")
        sys.path.insert(0, HERE)
        from prepro import gpt2_encoding   # tiktoken's GPT-2 encoding from the local BPE files
        enc = gpt2_encoding(args.bpe_dir)
        for name, (src, reader, kind) in sources.items():
            try:
                n = write_eval_file(outputs[name], kind, encode_items(enc, reader(src)))
            except UnicodeDecodeError:
                die(f"{src}: not UTF-8 text")
            except OSError as e:
                die(f"{e.filename or outputs[name]}: {e.strerror or e}")
            print(f"wrote {outputs[name]} ({n} stream values)")
    for name, path in outputs.items():
        if os.path.isdir(path):
            die(f"{path} is a directory, not an eval token file")
        if not os.path.isfile(path):
            die(f"{path} not found; build it with python3 dev/data/eval_prepro.py (data/README.md)")
        try:
            kind, items = read_eval_file(path)
        except OSError as e:
            die(f"{path}: {e.strerror or e}")
        except ValueError as e:
            die(str(e))
        lengths = [len(c) + max(len(x) for x in cs) for c, cs, _ in items]
        print(f"{name}: {len(items)} items, kind {kind}, item length mean {np.mean(lengths):.1f} max {max(lengths)} "
              f"tokens, {os.path.getsize(path) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
