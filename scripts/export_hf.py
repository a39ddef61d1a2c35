#!/usr/bin/env python3
"""export_hf.py: a train_gpt_fp4 checkpoint -> a Hugging Face model directory (GPT-2 or Llama).

  python3 scripts/export_hf.py out/ckpt_00000763.bin hf/enwiki_nvfp4
  python3 -c "from transformers import AutoModelForCausalLM as M; M.from_pretrained('hf/enwiki_nvfp4')"

The checkpoint's header says the family (llmc/run/ckpt_fields.h: H_ARCH, 0 in every GPT-2 checkpoint):
a GPT-2 model becomes transformers' GPT2LMHeadModel, a Llama model (docs/MODELS.md) its LlamaForCausalLM.
Writes model.safetensors (the weights, FP32 by default: the checkpoint's BF16 values exactly; --dtype
bfloat16 keeps the BF16 bits), config.json for that class, generation_config.json, and, when the GPT-2
BPE files are found (--bpe_dir), the tokenizer files (vocab.json, merges.txt) so that AutoTokenizer
loads from the same directory (both families use GPT-2's tokenizer). Needs numpy only (the safetensors
file is written here, in its documented format); transformers and torch are needed to load the result,
not to make it. dev/test/test_export.c checks the files value for value; dev/eval/check_export.py checks
transformers' logits on the export against the trainer's (GPU).

GPT-2: the mapping (train_gpt_fp4's tensors, in llmc order, to GPT-2's names):
  wte (Vp x C)      -> transformer.wte.weight, cut back to the vocabulary's V rows (the padding rows
                       are never a target); the LM head is tied to it (tie_word_embeddings), as here
  wpe               -> transformer.wpe.weight
  per layer l: ln1w/ln1b -> h.l.ln_1, qkvw/qkvb -> h.l.attn.c_attn, attprojw/b -> h.l.attn.c_proj,
               ln2w/ln2b -> h.l.ln_2, fcw/fcb -> h.l.mlp.c_fc, fcprojw/b -> h.l.mlp.c_proj
  lnfw/lnfb         -> transformer.ln_f
GPT-2's linear layers are Conv1D modules that store W as (in, out), so the four weight matrices are
transposed. QKV's output channels are [all heads' q | k | v] on both sides, GELU is the tanh form
(gelu_new), LayerNorm's epsilon 1e-5: the same network, no other change.

Llama: the mapping (llmc/model/llama.h's tensors, in storage order, to LlamaForCausalLM's names):
  wte (Vp x C)      -> model.embed_tokens.weight, cut to V rows
  per layer l (prefix model.layers.l.):
    ln1w            -> input_layernorm.weight
    qkvw ((NH + 2 KVH) HS x C): rows [0, NH HS) -> self_attn.q_proj.weight, the next KVH HS rows ->
                       self_attn.k_proj.weight, the last KVH HS rows -> self_attn.v_proj.weight
    attprojw        -> self_attn.o_proj.weight
    ln2w            -> post_attention_layernorm.weight
    fcw (2H x C): rows [0, H) (the gate) -> mlp.gate_proj.weight, rows [H, 2H) (up) -> mlp.up_proj.weight
    fcprojw (C x H) -> mlp.down_proj.weight
  lnfw              -> model.norm.weight
  lm_head (Vp x C)  -> lm_head.weight, cut to V rows; absent when the checkpoint ties the head to wte
                       (tie_word_embeddings true)
nn.Linear stores W as (out, in), as the trainer does: nothing is transposed. The q and k rows are copied
as they are, with no RoPE permutation: the trainer's RoPE is transformers' "rotate halves" convention
(element i of a head pairs with i + HS/2), the layout LlamaForCausalLM expects. config.json carries the
shape (hidden_size C, intermediate_size H, num_attention_heads NH, num_key_value_heads KVH, head_dim HS,
max_position_embeddings maxT), rms_norm_eps and rope_theta from the header (float32, written as the
shortest decimal that reads back as the same float32), hidden_act silu, no biases.

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
# llmc/run/ckpt_fields.h: the trainer's header fields, from CKPT_H_USER = 3 on
H_LAYERS, H_HEADS, H_CHANNELS, H_VOCAB, H_PADDED_VOCAB, H_MAX_T, H_STEP = 3, 4, 5, 6, 7, 8, 9
H_HAS_PARAMS = 18
# the model family's fields (0 in every GPT-2 checkpoint); H_ROPE_THETA and H_NORM_EPS hold float32 bits
H_ARCH, H_KV_HEADS, H_MLP_HIDDEN, H_TIED, H_ROPE_THETA, H_NORM_EPS = 23, 24, 25, 26, 27, 28
ARCH_GPT2, ARCH_LLAMA = 0, 1   # llmc/model/gpt_config.h, Arch
SECTIONS = ["header", "weights", "optimizer state", "data position", "rng", "spike detector"]
EOT = 50256


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def param_shapes(L, C, Vp, maxT):
    """GPT-2's parameter tensors in storage order (llmc/model/gpt2.h), per-layer ones stacked."""
    return [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
            ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)), ("attprojb", (L, C)),
            ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)),
            ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)), ("lnfw", (C,)), ("lnfb", (C,))]


def llama_param_shapes(m):
    """Llama's parameter tensors in storage order (llmc/model/llama.h, docs/MODELS.md), per-layer ones stacked;
    lm_head only when the head is not tied."""
    L, C, Vp, HS, H = m["L"], m["C"], m["Vp"], m["HS"], m["H"]
    shapes = [("wte", (Vp, C)), ("ln1w", (L, C)), ("qkvw", (L, (m["NH"] + 2 * m["KVH"]) * HS, C)),
              ("attprojw", (L, C, C)), ("ln2w", (L, C)), ("fcw", (L, 2 * H, C)), ("fcprojw", (L, C, H)), ("lnfw", (C,))]
    return shapes if m["tied"] else shapes + [("lm_head", (Vp, C))]


def f32_of_bits(word):
    """A header word holding float32 bits -> the float, as the shortest decimal that reads back as that float32
    (1e-5f -> 1e-05, not 9.99999974738e-06)."""
    return float(str(np.array([word], dtype="<i4").view("<f4")[0]))


def model_of_header(h, path):
    """The model's shape from the header: a dict with arch, L, NH, C, V, Vp, maxT and, for Llama, KVH, HS, H,
    tied, theta, eps; refuses an unknown family or an impossible Llama shape."""
    m = {"arch": int(h[H_ARCH]), "L": int(h[H_LAYERS]), "NH": int(h[H_HEADS]), "C": int(h[H_CHANNELS]),
         "V": int(h[H_VOCAB]), "Vp": int(h[H_PADDED_VOCAB]), "maxT": int(h[H_MAX_T])}
    if m["arch"] == ARCH_GPT2:
        return m
    if m["arch"] != ARCH_LLAMA:
        die(f"checkpoint '{path}': unknown model family {m['arch']} in its header (0 GPT-2, 1 Llama; written by a "
            f"newer build?)")
    m.update(KVH=int(h[H_KV_HEADS]), H=int(h[H_MLP_HIDDEN]), tied=int(h[H_TIED]) != 0,
             theta=f32_of_bits(h[H_ROPE_THETA]), eps=f32_of_bits(h[H_NORM_EPS]))
    L, NH, C, KVH = m["L"], m["NH"], m["C"], m["KVH"]
    ok = (min(L, NH, C, KVH, m["H"], m["V"], m["maxT"]) > 0 and C % NH == 0 and (C // NH) % 2 == 0 and
          NH % KVH == 0 and m["Vp"] >= m["V"] and m["theta"] > 0 and m["eps"] > 0)
    if not ok:
        die(f"checkpoint '{path}': its header describes an impossible Llama model (layers {L}, heads {NH}, kv heads "
            f"{KVH}, channels {C}, MLP {m['H']}, vocabulary {m['V']} padded {m['Vp']}, positions {m['maxT']}, RoPE "
            f"theta {m['theta']}, RMSNorm eps {m['eps']})")
    m["HS"] = C // NH
    return m


def describe(m):
    if m["arch"] == ARCH_GPT2:
        return f"a model of {m['L']} layers and {m['C']} channels"
    return (f"a Llama model of {m['L']} layers, {m['C']} channels, {m['NH']} heads ({m['KVH']} key/value), MLP "
            f"{m['H']}, {'a tied' if m['tied'] else 'an untied'} head")


def read_checkpoint(path):
    """-> (header int32[256], recipe text, {name: uint16 BF16 bits array}); refuses damaged files.
    (The GPT-2 and Llama tensors' names are llmc/model/gpt2.h's and llama.h's.)"""
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
        m = model_of_header(h, path)
        shapes = (param_shapes(m["L"], m["C"], m["Vp"], m["maxT"]) if m["arch"] == ARCH_GPT2 else
                  llama_param_shapes(m))
        n = sum(int(np.prod(s)) for _, s in shapes)
        if wbytes != 2 * n:
            die(f"checkpoint '{path}': its weights section holds {wbytes} bytes, {describe(m)} "
                f"needs {2 * n} (written by an incompatible build?)")
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


def bf16_to(bits, dtype):
    """BF16 bits -> the export dtype (float32 exactly, or the bits themselves), contiguous."""
    bits = np.ascontiguousarray(bits)
    if dtype == "bfloat16":
        return bits
    return (bits.astype(np.uint32) << 16).view(np.float32)


def hf_tensors(h, params, dtype):
    """The GPT-2 state dict (transformers' names), as contiguous arrays of the export dtype."""
    L, V = int(h[H_LAYERS]), int(h[H_VOCAB])

    def conv(bits):
        return bf16_to(bits, dtype)

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


def llama_tensors(m, params, dtype):
    """The LlamaForCausalLM state dict (transformers' names), as contiguous arrays of the export dtype. nn.Linear
    stores (out, in) as the trainer does: row slices, no transposes, no RoPE permutation (docs/MODELS.md)."""
    V, H, HS = m["V"], m["H"], m["HS"]
    q_end, k_end = m["NH"] * HS, (m["NH"] + m["KVH"]) * HS

    def conv(bits):
        return bf16_to(bits, dtype)

    out = {"model.embed_tokens.weight": conv(params["wte"][:V])}
    for l in range(m["L"]):
        pre = f"model.layers.{l}."
        qkv, fc = params["qkvw"][l], params["fcw"][l]
        out[pre + "input_layernorm.weight"] = conv(params["ln1w"][l])
        out[pre + "self_attn.q_proj.weight"] = conv(qkv[:q_end])
        out[pre + "self_attn.k_proj.weight"] = conv(qkv[q_end:k_end])
        out[pre + "self_attn.v_proj.weight"] = conv(qkv[k_end:])
        out[pre + "self_attn.o_proj.weight"] = conv(params["attprojw"][l])
        out[pre + "post_attention_layernorm.weight"] = conv(params["ln2w"][l])
        out[pre + "mlp.gate_proj.weight"] = conv(fc[:H])
        out[pre + "mlp.up_proj.weight"] = conv(fc[H:])
        out[pre + "mlp.down_proj.weight"] = conv(params["fcprojw"][l])
    out["model.norm.weight"] = conv(params["lnfw"])
    if not m["tied"]:
        out["lm_head.weight"] = conv(params["lm_head"][:V])
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


def llama_config(m, dtype):
    theta = m["theta"]
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": m["V"],
        "hidden_size": m["C"],
        "intermediate_size": m["H"],
        "num_hidden_layers": m["L"],
        "num_attention_heads": m["NH"],
        "num_key_value_heads": m["KVH"],
        "head_dim": m["HS"],
        "hidden_act": "silu",                 # the SwiGLU's gate: silu(gate) * up
        "max_position_embeddings": m["maxT"],
        "rms_norm_eps": m["eps"],
        # the default RoPE (rotate halves) with the header's theta: rope_theta for transformers 4,
        # rope_parameters for transformers 5 (each reads the other's form too)
        "rope_theta": theta,
        "rope_scaling": None,
        "rope_parameters": {"rope_type": "default", "rope_theta": theta},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "pretraining_tp": 1,
        "initializer_range": 0.02,
        "tie_word_embeddings": bool(m["tied"]),
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
    m = model_of_header(h, args.checkpoint)
    llama = m["arch"] == ARCH_LLAMA
    os.makedirs(args.out_dir, exist_ok=True)
    tensors = llama_tensors(m, params, args.dtype) if llama else hf_tensors(h, params, args.dtype)
    meta = {"format": "pt", "source": "train_gpt_fp4", "checkpoint": os.path.abspath(args.checkpoint),
            "step": int(h[H_STEP]), "recipe": recipe}
    write_safetensors(os.path.join(args.out_dir, "model.safetensors"), tensors, meta)
    with open(os.path.join(args.out_dir, "config.json"), "w") as f:
        json.dump(llama_config(m, args.dtype) if llama else hf_config(h, args.dtype), f, indent=2)
    with open(os.path.join(args.out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": EOT, "eos_token_id": EOT}, f, indent=2)
    copy_tokenizer(args.bpe_dir, args.out_dir, int(h[H_MAX_T]))
    n = sum(a.size for a in tensors.values())
    if llama:
        shape = (f"Llama with {m['L']} layers, {m['NH']} heads ({m['KVH']} key/value heads), {m['C']} channels, MLP "
                 f"{m['H']}, {'a tied' if m['tied'] else 'an untied'} head, RoPE theta {m['theta']:g}, RMSNorm eps "
                 f"{m['eps']:g}")
    else:
        shape = f"GPT-2 with {m['L']} layers, {m['NH']} heads, {m['C']} channels"
    print(f"wrote {args.out_dir}: {shape}, vocabulary {m['V']} (padded {m['Vp']} in the checkpoint), "
          f"{n} parameters ({args.dtype}), step {int(h[H_STEP])}, trained with recipe '{recipe.split(':')[0]}'")


if __name__ == "__main__":
    main()
