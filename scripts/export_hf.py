#!/usr/bin/env python3
"""export_hf.py: a train_gpt_fp4 checkpoint -> a Hugging Face GPT-2 model directory.

  python3 scripts/export_hf.py out/ckpt_00000763.bin hf/enwiki_nvfp4
  python3 -c "from transformers import GPT2LMHeadModel as M; M.from_pretrained('hf/enwiki_nvfp4')"

Writes model.safetensors (the weights, FP32 by default: the checkpoint's BF16 values exactly; --dtype
bfloat16 keeps the BF16 bits), config.json for transformers' GPT2LMHeadModel, generation_config.json,
and, when the GPT-2 BPE files are found (--bpe_dir), the tokenizer files (vocab.json, merges.txt) so
that AutoTokenizer loads from the same directory. Needs numpy only (the safetensors file is written
here, in its documented format); transformers and torch are needed to load the result, not to make it.

The mapping (train_gpt_fp4's tensors, in llmc order, to GPT-2's names):
  wte (Vp x C)      -> transformer.wte.weight, cut back to the vocabulary's V rows (the padding rows
                       are never a target); the LM head is tied to it (tie_word_embeddings), as here
  wpe               -> transformer.wpe.weight
  per layer l: ln1w/ln1b -> h.l.ln_1, qkvw/qkvb -> h.l.attn.c_attn, attprojw/b -> h.l.attn.c_proj,
               ln2w/ln2b -> h.l.ln_2, fcw/fcb -> h.l.mlp.c_fc, fcprojw/b -> h.l.mlp.c_proj
  lnfw/lnfb         -> transformer.ln_f
GPT-2's linear layers are Conv1D modules that store W as (in, out), so the four weight matrices are
transposed. QKV's output channels are [all heads' q | k | v] on both sides, GELU is the tanh form
(gelu_new), LayerNorm's epsilon 1e-5: the same network, no other change.

The precision recipe is not part of the export: transformers runs the network in BF16/FP32, so an
FP4-trained model's exported logits are those of its forward with BF16 GEMMs (train_gpt_fp4
--eval-precision bf16 computes the same).

The checkpoint is read as llmc/run/checkpoint.h writes it (format versions 2 and 3, which differ only in a
later section): the header section with its CRC32, then the weights section, whose CRC32 is checked too,
so a damaged file is refused.
"""
import argparse
import json
import os
import shutil
import struct
import sys
import zlib

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CKPT_MAGIC, CKPT_VERSIONS, HEADER_INTS = 20261129, (2, 3), 256
H_TEXT_BYTES, H_TABLE, H_HEADER_CRC = 2, 224, 255
# llmc/model/gpt_config.h: the trainer's header fields, from CKPT_H_USER = 3 on
H_LAYERS, H_HEADS, H_CHANNELS, H_VOCAB, H_PADDED_VOCAB, H_MAX_T, H_STEP = 3, 4, 5, 6, 7, 8, 9
H_HAS_PARAMS = 18
SECTIONS = ["header", "weights", "optimizer state", "data position", "rng", "spike detector"]
EOT = 50256


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def param_shapes(L, C, Vp, maxT):
    """The trainer's parameter tensors in storage order (train_gpt_fp4.cu, param_sizes), per-layer ones stacked."""
    return [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
            ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)), ("attprojb", (L, C)),
            ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)),
            ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)), ("lnfw", (C,)), ("lnfb", (C,))]


def read_checkpoint(path):
    """-> (header int32[256], recipe text, {name: uint16 BF16 bits array}); refuses damaged files."""
    try:
        f = open(path, "rb")
    except OSError as e:
        die(f"cannot open checkpoint '{path}': {e.strerror}")
    with f:
        raw_h = f.read(4 * HEADER_INTS)
        if len(raw_h) != 4 * HEADER_INTS:
            die(f"'{path}' is shorter than a checkpoint header: not a checkpoint, or truncated")
        h = np.frombuffer(raw_h, dtype="<i4").copy()
        if h[0] != CKPT_MAGIC:
            die(f"'{path}' is not a train_gpt_fp4 checkpoint (magic {h[0]})")
        if h[1] not in CKPT_VERSIONS:
            die(f"'{path}' has checkpoint format version {h[1]}; this script reads versions {CKPT_VERSIONS[0]} to "
                f"{CKPT_VERSIONS[-1]}")
        text = f.read(int(h[H_TEXT_BYTES]))
        hz = h.copy()
        hz[H_HEADER_CRC] = 0
        if zlib.crc32(text, zlib.crc32(hz.tobytes())) != (int(h[H_HEADER_CRC]) & 0xFFFFFFFF):
            die(f"checkpoint '{path}': the header section is corrupt (CRC32 mismatch)")
        if not h[H_HAS_PARAMS]:
            die(f"'{path}' is an optimizer shard (ckpt_XXXXXXXX.rankRRR.bin); give the main checkpoint file")
        table = h[H_TABLE:H_TABLE + 3 * (len(SECTIONS) - 1)].view(np.uint32).reshape(-1, 3)
        wbytes = int(table[0, 0]) | (int(table[0, 1]) << 32)
        L, NH, C = int(h[H_LAYERS]), int(h[H_HEADS]), int(h[H_CHANNELS])
        V, Vp, maxT = int(h[H_VOCAB]), int(h[H_PADDED_VOCAB]), int(h[H_MAX_T])
        shapes = param_shapes(L, C, Vp, maxT)
        n = sum(int(np.prod(s)) for _, s in shapes)
        if wbytes != 2 * n:
            die(f"checkpoint '{path}': its weights section holds {wbytes} bytes, a model of {L} layers and {C} "
                f"channels needs {2 * n} (written by an incompatible build?)")
        weights = f.read(wbytes)
        if len(weights) != wbytes:
            die(f"checkpoint '{path}' is truncated in its weights section")
        if zlib.crc32(weights) != int(table[0, 2]):
            die(f"checkpoint '{path}': the weights section is corrupt (CRC32 mismatch); export an earlier checkpoint")
    flat = np.frombuffer(weights, dtype="<u2")
    params, off = {}, 0
    for name, shape in shapes:
        k = int(np.prod(shape))
        params[name] = flat[off:off + k].reshape(shape)
        off += k
    return h, text.decode("utf-8", "replace"), params


def hf_tensors(h, params, dtype):
    """The GPT-2 state dict (transformers' names), as contiguous arrays of the export dtype."""
    L, V = int(h[H_LAYERS]), int(h[H_VOCAB])

    def conv(bits):   # BF16 bits -> the export dtype (float32 exactly, or the bits themselves)
        bits = np.ascontiguousarray(bits)
        if dtype == "bfloat16":
            return bits
        return (bits.astype(np.uint32) << 16).view(np.float32)

    def t(x):          # llmc's (out, in) -> Conv1D's (in, out)
        return np.ascontiguousarray(x.T)

    out = {"transformer.wte.weight": conv(params["wte"][:V]), "transformer.wpe.weight": conv(params["wpe"])}
    # (our tensor, transformers' name, transposed: the linears' weights, which Conv1D stores as (in, out))
    layer = [("ln1w", "ln_1.weight", 0), ("ln1b", "ln_1.bias", 0), ("qkvw", "attn.c_attn.weight", 1),
             ("qkvb", "attn.c_attn.bias", 0), ("attprojw", "attn.c_proj.weight", 1), ("attprojb", "attn.c_proj.bias", 0),
             ("ln2w", "ln_2.weight", 0), ("ln2b", "ln_2.bias", 0), ("fcw", "mlp.c_fc.weight", 1),
             ("fcb", "mlp.c_fc.bias", 0), ("fcprojw", "mlp.c_proj.weight", 1), ("fcprojb", "mlp.c_proj.bias", 0)]
    for l in range(L):
        for ours, theirs, transposed in layer:
            x = conv(params[ours][l])
            out[f"transformer.h.{l}.{theirs}"] = t(x) if transposed else x
    out["transformer.ln_f.weight"] = conv(params["lnfw"])
    out["transformer.ln_f.bias"] = conv(params["lnfb"])
    return out


def write_safetensors(path, tensors, metadata):
    """safetensors: u64 little-endian header length, a JSON header (name -> dtype, shape, byte range in the
    data; "__metadata__" -> strings), padded with spaces to 8 bytes, then the tensors' bytes in order."""
    header, off = {}, 0
    for name, a in tensors.items():
        dt = "BF16" if a.dtype == np.uint16 else "F32"
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
    header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * (-len(hb) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for a in tensors.values():
            f.write(np.ascontiguousarray(a).tobytes())   # little-endian, as the machines here are
    os.replace(tmp, path)


def hf_config(h, dtype):
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": int(h[H_VOCAB]),
        "n_positions": int(h[H_MAX_T]),
        "n_ctx": int(h[H_MAX_T]),
        "n_embd": int(h[H_CHANNELS]),
        "n_layer": int(h[H_LAYERS]),
        "n_head": int(h[H_HEADS]),
        "n_inner": None,                      # 4 * n_embd
        "activation_function": "gelu_new",    # the tanh approximation (llmc/model/gelu.cuh)
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,   # trained without dropout
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True,
        "use_cache": True,
        "bos_token_id": EOT,
        "eos_token_id": EOT,
        "torch_dtype": dtype,
    }


def copy_tokenizer(bpe_dir, out_dir, n_positions):
    encoder, merges = os.path.join(bpe_dir, "encoder.json"), os.path.join(bpe_dir, "vocab.bpe")
    if not (os.path.exists(encoder) and os.path.exists(merges)):
        print(f"note: no GPT-2 BPE files in {bpe_dir}; the export has no tokenizer files (use --bpe_dir)")
        return
    shutil.copyfile(encoder, os.path.join(out_dir, "vocab.json"))
    shutil.copyfile(merges, os.path.join(out_dir, "merges.txt"))
    eot = "<|endoftext|>"
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer", "model_max_length": n_positions, "add_prefix_space": False,
                   "bos_token": eot, "eos_token": eot, "unk_token": eot}, f, indent=2)
    with open(os.path.join(out_dir, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": eot, "eos_token": eot, "unk_token": eot}, f, indent=2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("checkpoint", help="a train_gpt_fp4 checkpoint (ckpt_XXXXXXXX.bin)")
    ap.add_argument("out_dir", help="the model directory to write (created)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                    help="weights in the safetensors file (both hold the checkpoint's BF16 values exactly)")
    ap.add_argument("--bpe_dir", default=os.path.join(REPO, "data", "gpt2"),
                    help="GPT-2's encoder.json and vocab.bpe, copied as the tokenizer files")
    args = ap.parse_args()

    h, recipe, params = read_checkpoint(args.checkpoint)
    os.makedirs(args.out_dir, exist_ok=True)
    tensors = hf_tensors(h, params, args.dtype)
    meta = {"format": "pt", "source": "train_gpt_fp4", "checkpoint": os.path.abspath(args.checkpoint),
            "step": int(h[H_STEP]), "recipe": recipe}
    write_safetensors(os.path.join(args.out_dir, "model.safetensors"), tensors, meta)
    with open(os.path.join(args.out_dir, "config.json"), "w") as f:
        json.dump(hf_config(h, args.dtype), f, indent=2)
    with open(os.path.join(args.out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": EOT, "eos_token_id": EOT}, f, indent=2)
    copy_tokenizer(args.bpe_dir, args.out_dir, int(h[H_MAX_T]))
    n = sum(a.size for a in tensors.values())
    print(f"wrote {args.out_dir}: GPT-2 with {int(h[H_LAYERS])} layers, {int(h[H_HEADS])} heads, {int(h[H_CHANNELS])} "
          f"channels, vocabulary {int(h[H_VOCAB])} (padded {int(h[H_PADDED_VOCAB])} in the checkpoint), "
          f"{n} parameters ({args.dtype}), step {int(h[H_STEP])}, trained with recipe '{recipe.split(':')[0]}'")


if __name__ == "__main__":
    main()
