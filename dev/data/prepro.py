"""prepro.py: text -> GPT-2 token shards (llm.c's .bin format) and the tokenizer file.

Inputs, one document each:
  *.txt                 the whole file is one document
  *.jsonl, *.jsonl.xz   one JSON object per line; its "text" field is one document
Every document is preceded by <|endoftext|> (50256), so documents are separated in the token stream.

Outputs (in --out_dir):
  NAME_val_000000.bin, NAME_train_000000.bin, NAME_train_000001.bin, ...   (or NAME_val.bin and
  NAME_train.bin with --plain_names). Shard format: 256 int32 header (20240520, 1, token count,
  zeros), then the tokens as uint16. llmc/run/dataloader.h reads them.
  --tokenizer_out (default data/gpt2_tokenizer.bin): 256 uint32 header (20240328, 2, vocab size,
  eot id, zeros), then per token a uint8 length and its bytes. llmc/run/tokenizer.h reads it.

Validation split: by default the first 1,000,000 tokens of the stream, or the first 10% of a stream of
fewer than 10M tokens (so a small corpus still gets both splits); or the first --val_tokens tokens, or
the first --val_fraction of it, or the documents of --val_input files instead (then the whole stream
is training data).

Nothing is left behind on failure: the shards are written into a temporary folder in --out_dir and
moved into place (replacing an earlier run's shards of the same name) only when both splits are whole.
Expected failures (a missing package or file, a directory given for a file, a split that would be
empty) end in one line "error: ..." on stderr and exit status 1.

The GPT-2 encoding is built from the BPE files in data/gpt2/ (encoder.json, vocab.bpe; MIT, the files
tiktoken's "gpt2" encoding is made of), so nothing is downloaded: our machines have no network.

Examples:
  python dev/data/prepro.py --input data/input.txt --name mytext --out_dir data/mytext --val_tokens 32768
  python dev/data/prepro.py --input /path/enwiki_0*.jsonl.xz --name enwiki --out_dir data/enwiki
"""
import argparse
import glob
import hashlib
import itertools
import json
import lzma
import os
import shutil
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("error: dev/data/prepro.py needs numpy: python3 -m pip install -r requirements.txt", file=sys.stderr)
    sys.exit(1)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARD_MAGIC, SHARD_VERSION = 20240520, 1
TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2
EOT = 50256
DEFAULT_VAL_TOKENS = 1_000_000
DEFAULT_VAL_SHARE = 0.1   # a corpus of fewer than DEFAULT_VAL_TOKENS / DEFAULT_VAL_SHARE tokens: this share
# GPT-2's pre-tokenizer split (the original form; newer tiktoken spells it with possessive quantifiers,
# same result, but this one works with every tiktoken version)
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
GPT2_SHA256 = {
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
}


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def script_name():
    """The running script as the user would type it (dev/data/prepro.py, dev/data/eval_prepro.py)."""
    path = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else __file__
    rel = os.path.relpath(path, REPO)
    return path if rel.startswith("..") else rel


def gpt2_ranks(encoder_json):
    """The BPE ranks tiktoken takes (token bytes -> id), from GPT-2's encoder.json, whose keys spell each token's
    bytes with GPT-2's byte-to-character map: the printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for
    themselves, every other byte b for chr(256 + n), n its place among those others in byte order. The merges
    in vocab.bpe give the same ranks (each merge's id is its rank; its sha256 is checked above). Built here
    rather than with tiktoken.load, which before tiktoken 0.12 reads local files only with blobfile installed."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    char_to_byte = {chr(b): b for b in printable}
    others = [b for b in range(256) if b not in char_to_byte.values()]
    char_to_byte.update({chr(256 + n): b for n, b in enumerate(others)})
    with open(encoder_json, encoding="utf-8") as f:
        encoder = json.load(f)
    ranks = {bytes(char_to_byte[c] for c in tok): i for tok, i in encoder.items() if tok != "<|endoftext|>"}
    if sorted(ranks.values()) != list(range(len(ranks))):
        die(f"{encoder_json}: the token ids are not 0..{len(ranks) - 1}")
    return ranks


def gpt2_encoding(bpe_dir):
    """tiktoken's GPT-2 encoding, from local BPE files (no download)."""
    try:
        import tiktoken
    except ImportError:
        die(f"{script_name()} needs tiktoken (GPT-2 tokenization): python3 -m pip install -r requirements.txt")
    if not os.path.isdir(bpe_dir):
        die(f"--bpe_dir {bpe_dir} is not a directory; give the one holding GPT-2's encoder.json and vocab.bpe "
            f"(the repo ships them in data/gpt2; data/README.md)")
    vocab_bpe = os.path.join(bpe_dir, "vocab.bpe")
    encoder_json = os.path.join(bpe_dir, "encoder.json")
    for path in (vocab_bpe, encoder_json):
        if not os.path.isfile(path):
            die(f"GPT-2 BPE file {path} is missing; copy encoder.json and vocab.bpe there "
                f"(the repo ships them in data/gpt2; data/README.md) or pass --bpe_dir")
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        if digest != GPT2_SHA256[os.path.basename(path)]:
            die(f"{path} is not GPT-2's file (sha256 {digest})")
    ranks = gpt2_ranks(encoder_json)
    enc = tiktoken.Encoding(name="gpt2_local", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": EOT}, explicit_n_vocab=50257)
    assert enc.n_vocab == 50257 and enc.eot_token == EOT
    return enc


def jsonl_texts(path):
    """Yields (line number, text) for every non-blank line of a .jsonl or .jsonl.xz file: a JSON object whose
    "text" field is a string (anything else ends the program with the file and line). eval_prepro.py reads
    LAMBADA with it too."""
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                text = json.loads(line)["text"]
            except (json.JSONDecodeError, KeyError, TypeError):
                die(f"{path}:{lineno}: not a JSON object with a \"text\" field")
            if not isinstance(text, str):
                die(f"{path}:{lineno}: the \"text\" field is not a string")
            yield lineno, text


def documents(paths):
    """Yields the text of every document, in order."""
    for path in paths:
        try:
            if path.endswith(".jsonl") or path.endswith(".jsonl.xz"):
                for _, text in jsonl_texts(path):
                    yield text
            else:
                with open(path, "r", encoding="utf-8") as f:
                    yield f.read()
        except UnicodeDecodeError:
            die(f"{path}: not UTF-8 text (--input takes text, .jsonl or .jsonl.xz files)")
        except (lzma.LZMAError, EOFError) as e:
            die(f"{path}: not a readable .xz file ({e or 'truncated'})")


def token_stream(enc, paths, threads, batch_docs=256):
    """Yields uint16 arrays: [EOT, tokens of doc] per document; tiktoken encodes batches in threads."""
    def flush(batch):
        for toks in enc.encode_ordinary_batch(batch, num_threads=threads):
            arr = np.empty(len(toks) + 1, dtype=np.uint16)
            arr[0] = EOT
            arr[1:] = toks
            yield arr
    batch = []
    for doc in documents(paths):
        batch.append(doc)
        if len(batch) == batch_docs:
            yield from flush(batch)
            batch = []
    if batch:
        yield from flush(batch)


class ShardWriter:
    """Cuts a token stream into shards of shard_size tokens: NAME_SPLIT_000000.bin, ..., written into tmp_dir;
    self.paths: the shards' names (in tmp_dir), self.counts their token counts."""

    def __init__(self, tmp_dir, name, split, shard_size, plain_names):
        self.out_dir, self.name, self.split = tmp_dir, name, split
        self.shard_size, self.plain_names = shard_size, plain_names
        self.buf = np.empty(shard_size, dtype=np.uint16)
        self.fill, self.index, self.total, self.paths, self.counts = 0, 0, 0, [], []

    def count(self):
        return self.total + self.fill

    def add(self, toks):
        while len(toks):
            take = min(len(toks), self.shard_size - self.fill)
            self.buf[self.fill:self.fill + take] = toks[:take]
            self.fill += take
            toks = toks[take:]
            if self.fill == self.shard_size:
                self._write()

    def _write(self):
        if self.plain_names and self.index > 0:
            die(f"the {self.split} split needs more than one shard of {self.shard_size} tokens; "
                f"drop --plain_names or raise --shard_size")
        suffix = "" if self.plain_names else f"_{self.index:06d}"
        path = os.path.join(self.out_dir, f"{self.name}_{self.split}{suffix}.bin")
        header = np.zeros(256, dtype=np.int32)
        header[0], header[1], header[2] = SHARD_MAGIC, SHARD_VERSION, self.fill
        with open(path, "wb") as f:
            f.write(header.astype("<i4").tobytes())
            f.write(self.buf[:self.fill].astype("<u2").tobytes())
        self.paths.append(os.path.basename(path))
        self.counts.append(self.fill)
        if self.fill == self.shard_size:   # progress on a long input; the files are named when moved into place
            print(f"{self.split} shard {self.index}: {self.fill:,} tokens", flush=True)
        self.total += self.fill
        self.index += 1
        self.fill = 0

    def close(self):
        if self.fill:
            self._write()


def write_tokenizer(enc, path):
    """Written to a temporary file beside path and renamed: path is never left half written."""
    n = enc.n_vocab
    header = np.zeros(256, dtype=np.uint32)
    header[0], header[1], header[2], header[3] = TOKENIZER_MAGIC, TOKENIZER_VERSION, n, enc.eot_token
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(header.astype("<u4").tobytes())
            for i in range(n):
                b = enc.decode_single_token_bytes(i)
                assert 1 <= len(b) <= 255, f"token {i} has {len(b)} bytes"
                f.write(bytes([len(b)]) + b)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    print(f"wrote {path}: {n} tokens")


def split_default(stream):
    """The default split of a token stream: -> (validation token count, the stream again, note or None).
    The first DEFAULT_VAL_TOKENS tokens, or DEFAULT_VAL_SHARE of a stream shorter than
    DEFAULT_VAL_TOKENS / DEFAULT_VAL_SHARE (held in memory until it is known to be longer: 20 MB)."""
    limit = int(DEFAULT_VAL_TOKENS / DEFAULT_VAL_SHARE)
    head, n = [], 0
    for toks in stream:
        head.append(toks)
        n += len(toks)
        if n >= limit:
            return DEFAULT_VAL_TOKENS, itertools.chain(head, stream), None
    if n < 2:
        die(f"the input holds {n} token(s): too few for a training and a validation split")
    n_val = max(1, int(n * DEFAULT_VAL_SHARE))
    note = (f"the input holds {n:,} tokens, fewer than {limit:,}: validation takes its first "
            f"{100 * DEFAULT_VAL_SHARE:g}% ({n_val:,} tokens; --val_tokens N or --val_fraction F choose otherwise)")
    return n_val, head, note


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--input", nargs="+", required=True, help="text / .jsonl / .jsonl.xz files (globs allowed)")
    p.add_argument("--name", required=True, help="shard name prefix, e.g. enwiki")
    p.add_argument("--out_dir", required=True, help="where the shards go (created)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--val_tokens", type=int, default=None,
                   help=f"first N tokens are validation (default {DEFAULT_VAL_TOKENS}, or "
                        f"{100 * DEFAULT_VAL_SHARE:g}%% of an input of fewer than "
                        f"{int(DEFAULT_VAL_TOKENS / DEFAULT_VAL_SHARE)} tokens)")
    g.add_argument("--val_fraction", type=float, default=None, help="first fraction of tokens is validation (holds all tokens in memory)")
    g.add_argument("--val_input", nargs="+", default=None, help="validation documents come from these files instead")
    p.add_argument("--shard_size", type=int, default=100_000_000, help="tokens per shard (default 1e8 = 200 MB)")
    p.add_argument("--plain_names", action="store_true", help="write NAME_train.bin / NAME_val.bin (one shard per split)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="tokenizer threads")
    p.add_argument("--bpe_dir", default=os.path.join(REPO, "data", "gpt2"), help="dir with encoder.json and vocab.bpe")
    p.add_argument("--tokenizer_out", default=os.path.join(REPO, "data", "gpt2_tokenizer.bin"),
                   help="tokenizer file to write ('' to skip)")
    args = p.parse_args()

    def expand(patterns, flag):
        out = []
        for pat in patterns:
            hits = sorted(glob.glob(pat))
            if not hits:
                die(f"no input file matches {pat} ({flag})")
            for h in hits:
                if os.path.isdir(h):
                    die(f"{h} is a directory ({flag}); give the files in it, e.g. '{h.rstrip('/')}/*.txt' "
                        f"or '{h.rstrip('/')}/*.jsonl.xz'")
            out += hits
        return out

    inputs = expand(args.input, "--input")
    val_inputs = expand(args.val_input, "--val_input") if args.val_input else None
    if args.shard_size < 1 or args.shard_size > 2**31 - 1:
        die("--shard_size must be in [1, 2^31)")
    if args.val_fraction is not None and not (0.0 <= args.val_fraction < 1.0):
        die("--val_fraction must be in [0, 1)")
    if args.val_tokens is not None and args.val_tokens < 0:
        die("--val_tokens must be 0 or more")
    if args.threads < 1:
        die("--threads must be 1 or more")
    if os.path.exists(args.out_dir) and not os.path.isdir(args.out_dir):
        die(f"--out_dir {args.out_dir} exists and is not a directory")
    if args.tokenizer_out and os.path.isdir(args.tokenizer_out):
        die(f"--tokenizer_out {args.tokenizer_out} is a directory; give a file path, e.g. "
            f"{os.path.join(args.tokenizer_out, 'gpt2_tokenizer.bin')}")

    enc = gpt2_encoding(args.bpe_dir)

    # the folders this run creates (removed again on failure, when empty), then a temporary folder in out_dir
    created, d = [], os.path.abspath(args.out_dir)
    while not os.path.exists(d):
        created.append(d)
        d = os.path.dirname(d)
    tmp_dir, committed = None, False
    try:
        os.makedirs(args.out_dir, exist_ok=True)
        tmp_dir = tempfile.mkdtemp(prefix=".prepro-", dir=args.out_dir)
        train = ShardWriter(tmp_dir, args.name, "train", args.shard_size, args.plain_names)
        val = ShardWriter(tmp_dir, args.name, "val", args.shard_size, args.plain_names)
        note = None
        if val_inputs:
            for toks in token_stream(enc, val_inputs, args.threads):
                val.add(toks)
            for toks in token_stream(enc, inputs, args.threads):
                train.add(toks)
        else:
            if args.val_fraction is not None:
                chunks = list(token_stream(enc, inputs, args.threads))
                alltoks = np.concatenate(chunks) if chunks else np.empty(0, dtype=np.uint16)
                n_val = int(len(alltoks) * args.val_fraction)
                stream = [alltoks]
            elif args.val_tokens is not None:
                n_val = args.val_tokens
                stream = token_stream(enc, inputs, args.threads)
            else:
                n_val, stream, note = split_default(token_stream(enc, inputs, args.threads))
            for toks in stream:
                if val.count() < n_val:
                    take = min(len(toks), n_val - val.count())
                    val.add(toks[:take])
                    toks = toks[take:]
                train.add(toks)
        val.close()
        train.close()
        if train.total == 0:
            n = val.total
            if val_inputs or n == 0:
                die("the training split is empty: the --input files hold no documents")
            if args.val_tokens is not None:
                die(f"the training split is empty: the input holds {n:,} tokens and --val_tokens {args.val_tokens:,} "
                    f"takes them all for validation; pass a smaller --val_tokens (e.g. {max(1, n // 10)}) "
                    f"or --val_fraction 0.1")
            die(f"the training split is empty: the input holds {n:,} tokens; pass --val_fraction 0.1")
        if note:
            print(f"note: {note}")

        # commit: the tokenizer file, then an earlier run's shards out (they would match the trainer's glob),
        # then this run's in
        if args.tokenizer_out:
            os.makedirs(os.path.dirname(os.path.abspath(args.tokenizer_out)), exist_ok=True)
            write_tokenizer(enc, args.tokenizer_out)
        stale = [q for split in ("train", "val") for q in
                 glob.glob(os.path.join(args.out_dir, f"{args.name}_{split}_[0-9][0-9][0-9][0-9][0-9][0-9].bin")) +
                 glob.glob(os.path.join(args.out_dir, f"{args.name}_{split}.bin"))]
        new = set(train.paths + val.paths)
        gone = [q for q in stale if os.path.basename(q) not in new]
        for q in gone:
            os.remove(q)
        if gone:
            print(f"removed {len(gone)} shard(s) of an earlier run from {args.out_dir}")
        for w in (val, train):
            for fname, n in zip(w.paths, w.counts):
                dst = os.path.join(args.out_dir, fname)
                os.replace(os.path.join(tmp_dir, fname), dst)
                print(f"wrote {dst}: {n:,} tokens")
        committed = True
    except OSError as e:
        what = e.filename if e.filename else args.out_dir
        die(f"{what}: {e.strerror or e}")
    finally:
        if tmp_dir:
            shutil.rmtree(tmp_dir, ignore_errors=True)
        if not committed:
            for d in created:   # deepest first
                try:
                    os.rmdir(d)
                except OSError:
                    break
    print(f"{args.name}: {val.total:,} validation tokens in {len(val.paths)} shard(s), "
          f"{train.total:,} training tokens in {len(train.paths)} shard(s)")


if __name__ == "__main__":
    main()
