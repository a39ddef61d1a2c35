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

Validation split: the first --val_tokens tokens of the stream (default), or the first --val_fraction
of it, or the documents of --val_input files instead (then the whole stream is training data).

The GPT-2 encoding is built from the BPE files in data/gpt2/ (encoder.json, vocab.bpe; MIT, the files
tiktoken's "gpt2" encoding is made of), so nothing is downloaded: our machines have no network.

Examples:
  python dev/data/prepro.py --input data/input.txt --name mytext --out_dir data/mytext --val_tokens 32768
  python dev/data/prepro.py --input /path/enwiki_0*.jsonl.xz --name enwiki --out_dir data/enwiki
"""
import argparse
import glob
import hashlib
import json
import lzma
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARD_MAGIC, SHARD_VERSION = 20240520, 1
TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2
EOT = 50256
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
    import tiktoken
    vocab_bpe = os.path.join(bpe_dir, "vocab.bpe")
    encoder_json = os.path.join(bpe_dir, "encoder.json")
    for path in (vocab_bpe, encoder_json):
        if not os.path.exists(path):
            die(f"GPT-2 BPE file {path} is missing; copy encoder.json and vocab.bpe there "
                f"(from /work/shared/data/gpt2) or pass --bpe_dir")
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        if digest != GPT2_SHA256[os.path.basename(path)]:
            die(f"{path} is not GPT-2's file (sha256 {digest})")
    ranks = gpt2_ranks(encoder_json)
    enc = tiktoken.Encoding(name="gpt2_local", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": EOT}, explicit_n_vocab=50257)
    assert enc.n_vocab == 50257 and enc.eot_token == EOT
    return enc


def documents(paths):
    """Yields the text of every document, in order."""
    for path in paths:
        if path.endswith(".jsonl") or path.endswith(".jsonl.xz"):
            opener = lzma.open if path.endswith(".xz") else open
            with opener(path, "rt", encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        text = json.loads(line)["text"]
                    except (json.JSONDecodeError, KeyError, TypeError):
                        die(f"{path}:{lineno}: not a JSON object with a \"text\" field")
                    yield text
        else:
            with open(path, "r", encoding="utf-8") as f:
                yield f.read()


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
    """Cuts a token stream into shards of shard_size tokens: NAME_SPLIT_000000.bin, ..."""

    def __init__(self, out_dir, name, split, shard_size, plain_names):
        self.out_dir, self.name, self.split = out_dir, name, split
        self.shard_size, self.plain_names = shard_size, plain_names
        self.buf = np.empty(shard_size, dtype=np.uint16)
        self.fill, self.index, self.total, self.paths = 0, 0, 0, []

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
        print(f"wrote {path}: {self.fill:,} tokens")
        self.paths.append(path)
        self.total += self.fill
        self.index += 1
        self.fill = 0

    def close(self):
        if self.fill:
            self._write()


def write_tokenizer(enc, path):
    n = enc.n_vocab
    header = np.zeros(256, dtype=np.uint32)
    header[0], header[1], header[2], header[3] = TOKENIZER_MAGIC, TOKENIZER_VERSION, n, enc.eot_token
    with open(path, "wb") as f:
        f.write(header.astype("<u4").tobytes())
        for i in range(n):
            b = enc.decode_single_token_bytes(i)
            assert 1 <= len(b) <= 255, f"token {i} has {len(b)} bytes"
            f.write(bytes([len(b)]) + b)
    print(f"wrote {path}: {n} tokens")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--input", nargs="+", required=True, help="text / .jsonl / .jsonl.xz files (globs allowed)")
    p.add_argument("--name", required=True, help="shard name prefix, e.g. enwiki")
    p.add_argument("--out_dir", required=True, help="where the shards go (created)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--val_tokens", type=int, default=None, help="first N tokens are validation (default 1000000)")
    g.add_argument("--val_fraction", type=float, default=None, help="first fraction of tokens is validation (holds all tokens in memory)")
    g.add_argument("--val_input", nargs="+", default=None, help="validation documents come from these files instead")
    p.add_argument("--shard_size", type=int, default=100_000_000, help="tokens per shard (default 1e8 = 200 MB)")
    p.add_argument("--plain_names", action="store_true", help="write NAME_train.bin / NAME_val.bin (one shard per split)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="tokenizer threads")
    p.add_argument("--bpe_dir", default=os.path.join(REPO, "data", "gpt2"), help="dir with encoder.json and vocab.bpe")
    p.add_argument("--tokenizer_out", default=os.path.join(REPO, "data", "gpt2_tokenizer.bin"),
                   help="tokenizer file to write ('' to skip)")
    args = p.parse_args()

    def expand(patterns):
        out = []
        for pat in patterns:
            hits = sorted(glob.glob(pat))
            if not hits:
                die(f"no input file matches {pat}")
            out += hits
        return out

    inputs = expand(args.input)
    val_inputs = expand(args.val_input) if args.val_input else None
    if args.shard_size < 1 or args.shard_size > 2**31 - 1:
        die("--shard_size must be in [1, 2^31)")
    if args.val_fraction is not None and not (0.0 <= args.val_fraction < 1.0):
        die("--val_fraction must be in [0, 1)")
    os.makedirs(args.out_dir, exist_ok=True)

    enc = gpt2_encoding(args.bpe_dir)
    if args.tokenizer_out:
        os.makedirs(os.path.dirname(os.path.abspath(args.tokenizer_out)), exist_ok=True)
        write_tokenizer(enc, args.tokenizer_out)

    # shards of an earlier run with other settings would match the trainer's glob: remove them
    stale = [q for split in ("train", "val") for q in
             glob.glob(os.path.join(args.out_dir, f"{args.name}_{split}_[0-9][0-9][0-9][0-9][0-9][0-9].bin")) +
             glob.glob(os.path.join(args.out_dir, f"{args.name}_{split}.bin"))]
    for q in stale:
        os.remove(q)
    if stale:
        print(f"removed {len(stale)} shard(s) of an earlier run from {args.out_dir}")

    train = ShardWriter(args.out_dir, args.name, "train", args.shard_size, args.plain_names)
    val = ShardWriter(args.out_dir, args.name, "val", args.shard_size, args.plain_names)
    if val_inputs:
        for toks in token_stream(enc, val_inputs, args.threads):
            val.add(toks)
        for toks in token_stream(enc, inputs, args.threads):
            train.add(toks)
    else:
        if args.val_fraction is not None:
            alltoks = np.concatenate(list(token_stream(enc, inputs, args.threads)))
            n_val = int(len(alltoks) * args.val_fraction)
            stream = [alltoks]
        else:
            n_val = 1_000_000 if args.val_tokens is None else args.val_tokens
            stream = token_stream(enc, inputs, args.threads)
        for toks in stream:
            if val.total + val.fill < n_val:
                take = min(len(toks), n_val - val.total - val.fill)
                val.add(toks[:take])
                toks = toks[take:]
            train.add(toks)
    val.close()
    train.close()
    if train.total == 0:
        die("the training split is empty: the input has fewer tokens than the validation split asks for")
    print(f"{args.name}: {val.total:,} validation tokens in {len(val.paths)} shard(s), "
          f"{train.total:,} training tokens in {len(train.paths)} shard(s)")


if __name__ == "__main__":
    main()
