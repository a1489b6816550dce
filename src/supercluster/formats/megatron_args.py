"""Megatron-LM's arguments: a model written as them and read back, and what a launch script's
flags say about the run.

Megatron-LM (``megatron/training/arguments.py``) builds its model from command-line flags; the same
flags written from a :class:`~supercluster.models.spec` build a model with the same weights and
FLOPs, and a launch script's flags read back give the model it trains (``--model run.sh``). What
enters the cost is written and read, and so is how the model is built (normalisation, position
embeddings, biases, QK norms: Megatron-LM's defaults are GPT's, so a Llama needs them said); what is
neither (the tokenizer, router options) is left to the script. The layout flags are read by
:func:`supercluster.formats.launchers.from_megatron_args`; the flags that switch framework behaviours
(overlaps, gradient precision, dropout, routing) by :mod:`.megatron_flags`.

=============================  ==================================================================
ModelSpec                      Megatron-LM arguments
=============================  ==================================================================
layers, width, FFN, heads      ``--num-layers --hidden-size --ffn-hidden-size --num-attention-heads``
head width, GQA                ``--kv-channels``, ``--group-query-attention --num-query-groups``
vocabulary, tied embeddings    ``--vocab-size`` (Megatron takes it from the tokenizer, so a script
                               may leave it out: then say it), ``--untie-embeddings-and-output-weights``
norm, positions, biases        ``--normalization RMSNorm|LayerNorm``, ``--position-embedding-type
                               rope|learned_absolute|none --rotary-base``, ``--disable-bias-linear``
                               (``--add-qkv-bias``), ``--qk-layernorm`` (ALiBi: no Megatron flag)
MLP activation                 ``--swiglu`` (SwiGLU), ``--quick-geglu`` (GeGLU; Megatron's GELU there
                               is the sigmoid approximation, same weights and FLOPs),
                               ``--squared-relu``; none: GELU
MoE                            ``--num-experts --moe-router-topk --moe-ffn-hidden-size
                               --moe-shared-expert-intermediate-size`` (all shared experts' width),
                               ``--moe-layer-freq`` (dense and MoE layers; only the count is priced),
                               ``--moe-latent-size`` (latent MoE), ``--moe-router-num-groups
                               --moe-router-group-topk`` (group-limited routing)
MLA                            ``--multi-latent-attention --q-lora-rank --kv-lora-rank --qk-head-dim
                               --qk-pos-emb-head-dim --v-head-dim`` (Megatron's defaults when absent)
sliding windows                ``--window-size (w,0) --window-attn-skip-freq``
multi-token prediction         ``--mtp-num-layers`` (hybrids: ``--mtp-hybrid-override-pattern``, ``*E`` / ``*-``)
DeepSeek Sparse Attention      ``--experimental-attention-variant dsa --dsa-indexer-n-heads
                               --dsa-indexer-head-dim --dsa-indexer-topk``
Gated DeltaNet, gated attn     ``--experimental-attention-variant gated_delta_net
                               --linear-attention-freq --linear-{key,value}-head-dim
                               --linear-num-{key,value}-heads --linear-conv-kernel-dim``,
                               ``--attention-output-gate``
Mamba-2 hybrids                ``--hybrid-override-pattern --mamba-num-heads --mamba-head-dim
                               --mamba-state-dim --mamba-num-groups`` (pretrain_mamba.py)
=============================  ==================================================================

Refused by name: Llama 4's chunked attention and plain ReLU MLPs (no Megatron flag) on export;
heterogeneous layer configs, encoder-decoder models, other ``--experimental-attention-variant`` values
and other MTP block patterns (not modelled) on import.
"""

from __future__ import annotations

import ast
import operator
import re
import shlex
from typing import Any

from ..errors import InputError, require
from ..files import MAX_SHELL_TEXT_CHARS, shell_words
from ..models.spec import MAX_LAYERS, MAX_SEQ, MAX_WIDTH, ModelSpec, check_router_groups, hybrid_counts

#: Megatron-LM's defaults for flags a script may leave out (arguments.py)
_MLA_DEFAULTS = {"kv-lora-rank": 32, "qk-head-dim": 128, "qk-pos-emb-head-dim": 64, "v-head-dim": 128}
_MAMBA_DEFAULTS = {"mamba-state-dim": 128, "mamba-head-dim": 64, "mamba-num-groups": 8}
_ATTENTION_VARIANTS = ("dsa", "gated_delta_net")
_SEQ_FLAGS = ("seq-length", "max-position-embeddings", "dsa-indexer-topk")
#: Model flags whose architecture this cost model does not price: refused, never ignored
_UNMODELLED = {
    "heterogeneous-layers-config-path": "heterogeneous layers (per-layer attention and FFN shapes)",
    "heterogeneous-layers-config-encoded-json": "heterogeneous layers (per-layer attention and FFN shapes)",
    "encoder-num-layers": "encoder-decoder models",
}


# ---- arguments text <-> a flag dictionary ----------------------------------------------------
#: a shell assignment with a literal value (``NUM_LAYERS=32``, ``export SEQ="4096"``)
_ASSIGN = re.compile(r"^\s*(?:export\s+|local\s+|readonly\s+)?([A-Za-z_]\w*)=(\S*)\s*(?:#.*)?$")
#: a shell variable reference: ``$NAME``, ``${NAME}``, ``${NAME:-default}``
_REF = re.compile(r"\$\{([A-Za-z_]\w*)(?::?[-=]([^}]*))?\}|\$([A-Za-z_]\w*)")


#: shell arithmetic on whole numbers once its variables are filled in: ``$((1 * 2048))``
_ARITH = re.compile(r"\$\(\(([\d\s+*/%()-]+)\)\)")
_ARITH_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.floordiv,
              ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}


#: bash's integers are 64-bit: a literal or result outside this range is not worked out (its text
#: stays, for the flag that reads it to refuse), which also keeps every operation cheap
_ARITH_MAX = 2**63 - 1


def _arithmetic(m: re.Match[str]) -> str:
    """The value of a ``$((...))`` of whole numbers (bash integer arithmetic, 64-bit), or the text
    unchanged."""
    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            out = node.value
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            out = -ev(node.operand)
        elif isinstance(node, ast.BinOp) and type(node.op) in _ARITH_OPS:
            out = _ARITH_OPS[type(node.op)](ev(node.left), ev(node.right))
        else:
            raise ValueError(node)
        if abs(out) > _ARITH_MAX:
            raise ValueError(node)
        return out

    try:
        return str(ev(ast.parse(m.group(1).strip(), mode="eval").body))
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
        return m.group(0)


#: a launch script filled in may grow to this multiple of its own size (plus EXPANSION_SLACK bytes):
#: variables that expand each other ("billion laughs") are refused, not expanded without bound
EXPANSION_FACTOR = 16
EXPANSION_SLACK = 64 * 1024


def _expand_variables(text: str) -> str:
    """A launch script with its simple variables filled in, line by line: a reference takes the
    last literal assignment above it, else its ``:-`` default, and whole-number ``$((...))``
    arithmetic is worked out; anything else (``$(...)``, positional arguments) is left as written,
    for the flag that reads it to refuse by name. The text filled in may not grow past
    :data:`EXPANSION_FACTOR` times the script (an InputError), so reading costs a small multiple of
    the script's size."""
    env: dict[str, str] = {}
    require(len(text) <= MAX_SHELL_TEXT_CHARS, "config", f"a launch script of {len(text):,} characters; at most "
            f"{MAX_SHELL_TEXT_CHARS:,} are read (launch scripts are a few thousand)")
    budget = min(EXPANSION_FACTOR * len(text) + EXPANSION_SLACK, MAX_SHELL_TEXT_CHARS)
    grown = 0

    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        if name in env:
            return env[name]
        return m.group(2).strip("\"'") if m.group(2) is not None else m.group(0)

    lines = []
    for line in text.splitlines():
        line = _REF.sub(value, line)
        grown += len(line)
        if grown > budget:
            raise InputError("config", f"its shell variables expand past {budget:,} characters (at most "
                             f"{EXPANSION_FACTOR}x the script's {len(text):,}, and {MAX_SHELL_TEXT_CHARS:,}: variables "
                             "that expand each other); write the flags' values")
        line = _ARITH.sub(_arithmetic, line)
        if (a := _ASSIGN.match(line)) and not a.group(2).startswith("("):
            env[a.group(1)] = a.group(2).strip("\"'")
        lines.append(line)
    return "\n".join(lines)


def parse_args(text: str) -> dict[str, Any]:
    """Megatron-LM flags from a launch script's text: ``--flag value`` as a string, a bare flag as
    True, ``--recompute-modules`` as the tuple of values up to the next flag. The script is read
    flat: simple shell variables filled in, comments, line continuations and bash array brackets
    skipped, a quoted ``"--flag value"`` item or a quoted assignment of flags (``opts="--a 1 --b"``)
    read word by word, underscores read as dashes, conditionals not followed (every flag written
    counts; the last value of a flag wins)."""
    filled = _expand_variables(text)
    words = shell_words(filled.replace("\\\n", " "), "config", "Megatron arguments")
    tokens = []
    for tok in words:
        # a bash array written on one line, ARGS=(--a 1 --b 2): its brackets are words of their own
        if re.match(r"[A-Za-z_]\w*\+?=\(", tok):
            tokens.append("(")
            tok = tok[tok.index("(") + 1:]
        close = tok.endswith(")") and "(" not in tok and tok != ")"
        tok = tok[:-1] if close else tok
        if not tok:
            tokens += [")"] if close else []
            continue
        # a quoted "--flag value" item, or flags gathered in a (quoted) assignment (opts=" --a 1 --b",
        # x=--swiglu): read the words inside
        assign = re.match(r"[A-Za-z_]\w*\+?=(.*)", tok, re.S)
        body = assign.group(1) if assign else tok
        if re.search(r"(^|\s)--", body) and (assign or re.search(r"\s", body)):
            try:
                inner = shlex.split(body, comments=True)
            except ValueError:
                inner = body.split()
            tokens += [w for w in inner if w != "\\"]
        else:
            tokens.append(tok)
        tokens += [")"] if close else []

    def is_value(j: int) -> bool:  # (not the next flag, a bash array bracket or a shell assignment)
        return (j < len(tokens) and not tokens[j].startswith("--") and tokens[j] not in ("(", ")")
                and re.match(r"[A-Za-z_]\w*\+?=", tokens[j]) is None)

    args: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("--"):
            name, eq, value = tok[2:].partition("=")
            key = name.replace("_", "-")
            if eq:  # --flag=value (argparse and torchrun read it as --flag value)
                args[key] = value
                i += 1
                continue
            if key == "recompute-modules":  # a list: every value up to the next flag
                j = i + 1
                while is_value(j):
                    j += 1
                args[key] = tuple(tokens[i + 1:j])
                i = j
                continue
            if is_value(i + 1):
                args[key] = tokens[i + 1]
                i += 2
                continue
            args[key] = True
        i += 1
    return args


def world_size(args: dict[str, Any]) -> int | None:
    """The GPUs a launch script starts: torchrun's ``--nnodes`` x ``--nproc-per-node`` (written, or
    filled in from ``NUM_NODES`` / ``GPUS_PER_NODE`` style variables); None where it does not say (an
    elastic ``--nnodes 2:4`` range, a value only known at run time)."""
    n, per = args.get("nnodes"), args.get("nproc-per-node")
    if not isinstance(n, str) or not isinstance(per, str) or not (n.isdigit() and per.isdigit()):
        return None
    require(len(n) <= 9 and len(per) <= 9 and int(n) > 0 and int(per) > 0, "nnodes",
            f"--nnodes {n} x --nproc-per-node {per}: each must be a positive whole number")
    return int(n) * int(per)


def node_gpus(args: dict[str, Any]) -> int | None:
    """The GPUs a node runs where a launch script starts several nodes (``--nproc-per-node`` when
    ``--nnodes`` is above one): the ranks that share a node's NVLink and NICs. None for one node (a
    node running 4 of its 8 GPUs says nothing of the node) or where the script does not say."""
    n, per = args.get("nnodes"), args.get("nproc-per-node")
    if world_size(args) is None or int(n) < 2:  # type: ignore[arg-type]
        return None
    return int(per)  # type: ignore[arg-type]


def has_model(args: dict[str, Any]) -> bool:
    """Whether the flags describe a model (its depth and width), not only a parallel layout."""
    return ("num-layers" in args or "hybrid-override-pattern" in args) and "hidden-size" in args


# ---- export ----------------------------------------------------------------------------------
def _layer_pattern(layers: int, marked: int) -> str:
    """Megatron's per-layer pattern for ``marked`` of ``layers`` layers: an integer N (every N-th
    layer is the unmarked kind) where the split is that regular, else a Python list expression."""
    other = layers - marked
    if other == 0:
        return f"([1]*{layers})"
    if layers % other == 0:
        return str(layers // other)
    return f"([1]*{marked}+[0]*{other})" if marked else f"([0]*{layers})"


#: ModelSpec.norm and .position_embedding as Megatron-LM's --normalization and --position-embedding-type
NORMALIZATION = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}
POSITION_TYPE = {"rope": "rope", "learned": "learned_absolute", "none": "none"}


def _build_args(m: ModelSpec) -> list[str]:
    """The flags of what Megatron-LM would otherwise build its own way: its defaults are LayerNorm,
    learned absolute positions and biases on every linear layer (GPT's), so each is written."""
    require(m.position_embedding in POSITION_TYPE, "model",
            f"{m.name}: {m.position_embedding} position embeddings have no Megatron-LM argument "
            f"(--position-embedding-type takes {', '.join(POSITION_TYPE.values())}); this export cannot write it")
    a = [f"--normalization {NORMALIZATION[m.norm]}", f"--position-embedding-type {POSITION_TYPE[m.position_embedding]}"]
    if m.position_embedding == "rope":
        a.append(f"--rotary-base {int(m.rope_base)}")
    if not m.linear_bias:
        a.append("--disable-bias-linear" + (" --add-qkv-bias" if m.qkv_bias else ""))
    if m.qk_norm:
        a.append("--qk-layernorm")
    return a


def model_args(m: ModelSpec, seq_len: int | None = None) -> list[str]:
    """The Megatron-LM arguments that build ``m`` (``seq_len``: the run's sequence, which
    ``--max-position-embeddings`` must cover)."""
    require(not m.attention_chunk, "model", f"{m.name}: chunked attention (Llama 4) has no Megatron-LM "
                                            "argument; this export cannot write it")
    require(m.mlp != "relu", "model", f"{m.name}: Megatron-LM has no plain-ReLU MLP argument "
                                      "(--squared-relu, --swiglu, --quick-geglu or the GELU default)")
    a = [f"--num-layers {m.num_layers}", f"--hidden-size {m.d_model}", f"--ffn-hidden-size {m.ffn_dim}",
         f"--num-attention-heads {m.num_heads}"]
    if m.kv_lora_rank:
        a.append("--multi-latent-attention" + (f" --q-lora-rank {m.q_lora_rank}" if m.q_lora_rank else "")
                 + f" --kv-lora-rank {m.kv_lora_rank} --qk-head-dim {m.head_dim - m.qk_rope_head_dim}"
                 f" --qk-pos-emb-head-dim {m.qk_rope_head_dim} --v-head-dim {m.v_dim}")
    else:
        require(m.v_dim == m.head_dim, "model", f"{m.name}: value heads {m.v_dim} wide beside {m.head_dim}-wide "
                                                "keys outside MLA have no Megatron-LM argument")
        a.append(f"--kv-channels {m.head_dim}")
        if m.num_kv_heads != m.num_heads:
            a.append(f"--group-query-attention --num-query-groups {m.num_kv_heads}")
    a.append(f"--vocab-size {m.vocab_size}")
    a.append(f"--max-position-embeddings {max(m.seq_len, seq_len or 0)}")
    a += _build_args(m)
    if not m.tied_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    act = {"swiglu": "--swiglu", "geglu": "--quick-geglu", "relu2": "--squared-relu"}.get(m.mlp)
    if act:
        a.append(act)
    if m.attn_output_gate:
        a.append("--attention-output-gate")
    if m.is_moe:
        a.append(f"--num-experts {m.num_experts} --moe-router-topk {m.top_k} --moe-ffn-hidden-size {m.moe_ffn_dim}"
                 " --moe-grouped-gemm")
        if m.shared_width:
            a.append(f"--moe-shared-expert-intermediate-size {m.shared_width}")
        if m.moe_latent_dim:
            a.append(f"--moe-latent-size {m.moe_latent_dim}")
        if m.router_groups:
            a.append(f"--moe-router-num-groups {m.router_groups} --moe-router-group-topk {m.router_group_topk}")
        if m.first_dense_layers and not m.hybrid_pattern:  # a hybrid's pattern places its MoE layers
            a.append("--moe-layer-freq " + shlex.quote(f"([0]*{m.first_dense_layers}+[1]*{m.num_moe_layers})"))
    if m.sliding_window:
        require(not m.recurrent_layers and not m.mlp_only_layers, "model",
                f"{m.name}: sliding windows in a hybrid stack are not written to Megatron-LM arguments")
        a.append("--window-size " + shlex.quote(f"({m.sliding_window},0)"))
        if m.window_layers < m.num_layers:  # 1 = a window layer, 0 = full attention
            a.append("--window-attn-skip-freq " + shlex.quote(_layer_pattern(m.num_layers, m.window_layers)))
    if m.mtp_layers:
        a.append(f"--mtp-num-layers {m.mtp_layers}")
        if m.hybrid_pattern:  # a hybrid's MTP block: attention and the model's MLP (Nemotron 3 Super: "*E")
            a.append("--mtp-hybrid-override-pattern " + shlex.quote("*E" if m.is_moe else "*-"))
    if m.index_topk:  # DeepSeek Sparse Attention (Megatron-Core's experimental attention variant)
        a.append(f"--experimental-attention-variant dsa --dsa-indexer-n-heads {m.index_heads} "
                 f"--dsa-indexer-head-dim {m.index_head_dim} --dsa-indexer-topk {m.index_topk}")
    if m.gdn_layers:
        require(not m.ssm_layers and not m.mlp_only_layers and not m.mixer_only_layers, "model",
                f"{m.name}: Gated DeltaNet beside Mamba or one-block layers has no Megatron-LM arguments")
        a.append("--experimental-attention-variant gated_delta_net --linear-attention-freq "
                 + shlex.quote(_layer_pattern(m.num_layers, m.gdn_layers))
                 + f" --linear-key-head-dim {m.gdn_k_dim} --linear-value-head-dim {m.gdn_v_dim}"
                 f" --linear-num-key-heads {m.gdn_k_heads} --linear-num-value-heads {m.gdn_v_heads}"
                 f" --linear-conv-kernel-dim {m.gdn_conv}")
    elif m.recurrent_layers or m.mlp_only_layers or m.mixer_only_layers:
        # a hybrid (Megatron-LM pretrain_mamba.py): its layer pattern and Mamba-2 widths
        require(bool(m.hybrid_pattern), "model",
                f"{m.name} is a hybrid without its layer pattern (hybrid_pattern); Megatron needs it")
        a.append(f"--hybrid-override-pattern {shlex.quote(m.hybrid_pattern)} --mamba-num-heads "
                 f"{m.ssm_heads} --mamba-head-dim {m.ssm_head_dim} --mamba-state-dim {m.ssm_state} "
                 f"--mamba-num-groups {m.ssm_groups}")
    return a


# ---- import ----------------------------------------------------------------------------------
def _int(args: dict[str, Any], flag: str, default: int | None = None, low: int = 1) -> int:
    """A whole-number flag, at least ``low`` (1: a count or a width; 0 where 0 means none) and at most
    the sanity ceilings of :mod:`supercluster.models` (a typo, not a model, beyond them)."""
    v = args.get(flag, default)
    require(v is not None, flag, "missing from the Megatron arguments")
    try:
        n = int(v)
    except (TypeError, ValueError):
        raise InputError(flag, f"must be an integer, got {v!r}") from None
    cap = MAX_LAYERS if flag in ("num-layers", "mtp-num-layers") else MAX_SEQ if flag in _SEQ_FLAGS else MAX_WIDTH
    require(low <= n <= cap, flag, f"must be in {low}..{cap:,}, got {n}")
    return n


def _pattern(args: dict[str, Any], flag: str, layers: int, every: str) -> list[int]:
    """A Megatron per-layer pattern: an integer N or a list expression such as ``([0]*3+[1]*58)``.
    ``every``: which layers an integer marks, ``"first"`` (layer i when i % N == 0: --moe-layer-freq)
    or ``"not-last"`` (all but every N-th: --linear-attention-freq, --window-attn-skip-freq)."""
    text = str(args[flag]).strip()
    if re.fullmatch(r"\d+", text):
        n = int(text)
        require(n >= 1, flag, f"must be >= 1, got {n}")
        if every == "first":
            return [1 if i % n == 0 else 0 for i in range(layers)]
        return [0 if (i + 1) % n == 0 else 1 for i in range(layers)]
    return _list_expression(flag, text, layers)


def _list_expression(flag: str, text: str, layers: int) -> list[int]:
    """Megatron's pattern expressions, read without eval: a sum of terms, each a bracketed list of
    0 / 1 or a parenthesised expression, optionally times a count (``([1]*3+[0]*1)*3``)."""
    src = text.replace(" ", "")
    pos = 0

    shown = text if len(text) <= 80 else f"{text[:80]}..."

    def fail(why: str) -> InputError:
        return InputError(flag, f"{shown!r}: {why} (write e.g. ([0]*3+[1]*58) or an integer)")

    def count() -> int:
        nonlocal pos
        m = re.compile(r"\d{1,9}").match(src, pos)
        if m is None:
            raise fail(f"a count of at most 9 digits expected at character {pos + 1}")
        pos = m.end()
        return int(m.group())

    def expr() -> list[int]:
        nonlocal pos
        out = term()
        while pos < len(src) and src[pos] == "+":
            pos += 1
            out.extend(term())
            if len(out) > 10 * MAX_LAYERS:
                raise fail("far longer than any model")
        return out

    def term() -> list[int]:
        nonlocal pos
        if src[pos:pos + 1] == "[":
            close = src.find("]", pos)
            if close < 0 or not re.fullmatch(r"[\d,]*", src[pos + 1:close]):
                raise fail("a list of 0 and 1 expected")
            items, pos = [int(x) for x in src[pos + 1:close].split(",") if x], close + 1
        elif src[pos:pos + 1] == "(":
            pos += 1
            items = expr()
            if src[pos:pos + 1] != ")":
                raise fail("a closing parenthesis expected")
            pos += 1
        else:
            raise fail(f"a list or a parenthesis expected at character {pos + 1}")
        if src[pos:pos + 1] == "*":
            pos += 1
            n = count()
            if len(items) * n > 10 * MAX_LAYERS:
                raise fail("far longer than any model")
            items = items * n
        return items

    try:
        out = expr()
    except RecursionError:
        raise fail("brackets nested too deeply") from None
    require(pos == len(src), flag, f"{shown!r}: cannot read past character {pos + 1}")
    require(len(out) == layers and set(out) <= {0, 1}, flag,
            f"{shown!r} gives {len(out)} entries of 0 / 1; the model has {layers} layers")
    return out


def model_from_args(args: dict[str, Any], key: str) -> ModelSpec:
    """The :class:`ModelSpec` Megatron-LM builds from these flags (see the module's table)."""
    require(has_model(args), "config", "no model in these Megatron arguments: needs --num-layers (or "
                                       "--hybrid-override-pattern) and --hidden-size")
    for flag, what in _UNMODELLED.items():
        require(flag not in args, flag, f"{what}: not modelled")
    f: dict[str, Any] = {}
    pattern = args.get("hybrid-override-pattern")
    if isinstance(pattern, str):
        f.update(hybrid_counts(pattern, "hybrid-override-pattern"), hybrid_pattern=pattern)
        if f["ssm_layers"]:
            for flag, default in _MAMBA_DEFAULTS.items():
                f[{"mamba-state-dim": "ssm_state", "mamba-head-dim": "ssm_head_dim",
                   "mamba-num-groups": "ssm_groups"}[flag]] = _int(args, flag, default)
            f["ssm_heads"] = _int(args, "mamba-num-heads", 2 * _int(args, "hidden-size") // f["ssm_head_dim"])
    layers = f.pop("num_layers", None) or _int(args, "num-layers")
    h, heads = _int(args, "hidden-size"), _int(args, "num-attention-heads")
    if args.get("multi-latent-attention"):
        mla = {k: _int(args, k, d) for k, d in _MLA_DEFAULTS.items()}
        f.update(q_lora_rank=_int(args, "q-lora-rank", 0, low=0), kv_lora_rank=mla["kv-lora-rank"],
                 qk_rope_head_dim=mla["qk-pos-emb-head-dim"], v_head_dim=mla["v-head-dim"])
        head_dim, kv = mla["qk-head-dim"] + mla["qk-pos-emb-head-dim"], heads
    else:
        head_dim = _int(args, "kv-channels", h // heads)
        kv = _int(args, "num-query-groups", 1) if args.get("group-query-attention") else heads
    vocab = args.get("vocab-size", args.get("padded-vocab-size"))
    require(vocab is not None, "vocab-size", "needed to price the embedding and the output layer: Megatron-LM "
                                             "takes it from the tokenizer, which this reader does not open; "
                                             "add --vocab-size N")
    mlp = ("swiglu" if args.get("swiglu") else "geglu" if args.get("quick-geglu")
           else "relu2" if args.get("squared-relu") else "gelu")
    if "num-experts" in args:
        experts = _int(args, "num-experts")
        moe_ffn = _int(args, "moe-ffn-hidden-size", _int(args, "ffn-hidden-size", 4 * h))
        f.update(num_experts=experts, top_k=_int(args, "moe-router-topk", 2), moe_ffn_dim=moe_ffn,
                 moe_latent_dim=_int(args, "moe-latent-size", 0, low=0))
        groups, kept = _int(args, "moe-router-num-groups", 0, low=0), _int(args, "moe-router-group-topk", 0, low=0)
        if groups > 1 and 0 < kept < groups:
            check_router_groups(experts, f["top_k"], groups, kept, "moe-router-num-groups", "moe-router-num-groups")
            f.update(router_groups=groups, router_group_topk=kept)
        shared = _int(args, "moe-shared-expert-intermediate-size", 0, low=0)
        if shared:
            whole = shared % moe_ffn == 0
            f.update(num_shared_experts=shared // moe_ffn if whole else 1, shared_ffn_dim=0 if whole else shared)
        if "moe-layer-freq" in args and not pattern:
            f["first_dense_layers"] = layers - sum(_pattern(args, "moe-layer-freq", layers, "first"))
    if "window-size" in args:
        m = re.fullmatch(r"\(?\s*(-?\d+)\s*,\s*(-?\d+)\s*\)?", str(args["window-size"]))
        require(m is not None and int(m.group(1)) > 0 and int(m.group(2)) == 0, "window-size",
                f"{args['window-size']!r}: a causal window reads (w,0) with w > 0")
        f["sliding_window"] = int(m.group(1))  # type: ignore[union-attr]
        f["window_layers"] = (sum(_pattern(args, "window-attn-skip-freq", layers, "not-last"))
                              if "window-attn-skip-freq" in args else layers)
    variant = args.get("experimental-attention-variant")
    require(variant is None or variant in _ATTENTION_VARIANTS, "experimental-attention-variant",
            f"{variant!r} is not modelled; allowed: {', '.join(_ATTENTION_VARIANTS)}")
    if variant == "dsa":
        f.update(index_heads=_int(args, "dsa-indexer-n-heads"), index_head_dim=_int(args, "dsa-indexer-head-dim"),
                 index_topk=_int(args, "dsa-indexer-topk"))
    elif variant == "gated_delta_net":
        require("linear-attention-freq" in args, "linear-attention-freq",
                "needed with --experimental-attention-variant gated_delta_net (which layers are linear)")
        f.update(gdn_layers=sum(_pattern(args, "linear-attention-freq", layers, "not-last")),
                 gdn_k_dim=_int(args, "linear-key-head-dim"), gdn_v_dim=_int(args, "linear-value-head-dim"),
                 gdn_k_heads=_int(args, "linear-num-key-heads"), gdn_v_heads=_int(args, "linear-num-value-heads"),
                 gdn_conv=_int(args, "linear-conv-kernel-dim", 4))
    mtp_pattern = args.get("mtp-hybrid-override-pattern")
    require(mtp_pattern is None or (str(mtp_pattern) == ("*E" if "num-experts" in args else "*-")), 
            "mtp-hybrid-override-pattern", f"{mtp_pattern!r}: an MTP block other than attention and the model's "
                                           "MLP (*E with experts, *- without) is not modelled")
    seq = _int(args, "seq-length", 0, low=0) or _int(args, "max-position-embeddings", 4096)
    f.update(_build_from_args(args))
    return ModelSpec(key=key, name=f"{key} (Megatron-LM arguments)", num_layers=layers, d_model=h,
                     ffn_dim=_int(args, "ffn-hidden-size", 4 * h), num_heads=heads, num_kv_heads=kv,
                     head_dim=head_dim, vocab_size=_int(args, "vocab-size" if "vocab-size" in args
                                                        else "padded-vocab-size"),
                     mlp=mlp, tied_embeddings=not args.get("untie-embeddings-and-output-weights"),
                     attn_output_gate=bool(args.get("attention-output-gate")),
                     mtp_layers=_int(args, "mtp-num-layers", 0, low=0),
                     seq_len=seq, source="Megatron-LM arguments", **f)


def float_flag(args: dict[str, Any], flag: str, default: float) -> float:
    try:
        return float(args.get(flag, default))
    except (TypeError, ValueError):
        raise InputError(flag, f"must be a number, got {args[flag]!r}") from None


def _build_from_args(args: dict[str, Any]) -> dict[str, Any]:
    """Norm, positions and biases as Megatron-LM builds them from the flags (its defaults where absent)."""
    norm = str(args.get("normalization", "LayerNorm"))
    require(norm in NORMALIZATION.values(), "normalization",
            f"{norm!r}; allowed: {', '.join(NORMALIZATION.values())}")
    pos = "rope" if args.get("use-rotary-position-embeddings") else str(args.get("position-embedding-type",
                                                                                 "learned_absolute"))
    require(pos in POSITION_TYPE.values(), "position-embedding-type",
            f"{pos!r} is not modelled; allowed: {', '.join(POSITION_TYPE.values())}")
    return dict(norm={v: k for k, v in NORMALIZATION.items()}[norm],
                position_embedding={v: k for k, v in POSITION_TYPE.items()}[pos],
                rope_base=float_flag(args, "rotary-base", 10000.0), linear_bias=not args.get("disable-bias-linear"),
                qkv_bias=bool(args.get("add-qkv-bias")), qk_norm=bool(args.get("qk-layernorm")))
