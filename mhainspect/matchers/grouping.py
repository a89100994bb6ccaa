"""Attention blocks from weight names and shapes alone (checkpoints, module parameter lists).

Pure: no torch, no I/O. A weight list (name, shape, dtype, storage key, layout) is grouped by
module prefix and role name (q_proj/k_proj/v_proj/o_proj, query/key/value + BERT's
``attention.output.dense``, c_attn/c_proj, qkv_proj, in_proj_weight/out_proj, T5's q/k/v/o, ...)
into blocks of projections with their widths. Head counts are not in weight names: callers add
them from module attributes or a config (see ``mhainspect.matchers.static``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from mhainspect.ir.weights import HEADS_FIRST, QuantRole, WeightMeta
from mhainspect.matchers.scopes import common_prefix
from mhainspect.results import Projection

# Role names of a projection module (the last component of its path), lower-cased.
Q_NAMES = frozenset({"q_proj", "query", "q", "wq", "q_lin", "to_q", "query_proj", "q_linear", "linear_q", "w_q",
                     "q_layer", "queries", "q_head"})
K_NAMES = frozenset({"k_proj", "key", "k", "wk", "k_lin", "to_k", "key_proj", "k_linear", "linear_k", "w_k",
                     "k_layer", "keys", "k_head"})
V_NAMES = frozenset({"v_proj", "value", "v", "wv", "v_lin", "to_v", "value_proj", "v_linear", "linear_v", "w_v",
                     "v_layer", "values", "v_head"})
O_NAMES = frozenset({"o_proj", "out_proj", "o", "wo", "out_lin", "dense", "c_proj", "proj", "out", "linear_out",
                     "output_proj", "o_linear", "out_linear", "w_o", "attention_output", "output_dense",
                     "post_proj"})
PACKED_NAMES = frozenset({"c_attn", "qkv_proj", "qkv", "query_key_value", "wqkv", "in_proj", "qkv_linear",
                          "w_pack", "qkv_layer"})
# A packed [K; V] beside a separate Q (timm's PVT and LeViT's downsampling attention ``kv``). Not
# ``kv_proj``: DeepSeek-V4's is one K shared as V, no split.
KV_PACKED_NAMES = frozenset({"kv"})
# Packed names that say "input projection", not "Q, K and V": state-space mixers (Mamba, Jamba,
# Zamba, Bamba) hold an ``in_proj`` and an ``out_proj`` too. Such a weight is a packed Q/K/V only
# under a module named as attention (DeBERTa's ``attention.self.in_proj``).
GENERIC_PACKED_NAMES = frozenset({"in_proj"})
# Names of an output gate's projection beside Q/K/V/O (besides a name with the word "gate"): the
# attention's result is multiplied by sigmoid(x W) before O (AFMoE's, Laguna's, HunYuan-V4's).
GATE_NAMES = frozenset({"g_proj", "wg", "to_gate"})
# Conv1D-style names (GPT-2 family): weights stored [in, out].
CONV1D_NAMES = frozenset({"c_attn", "c_proj", "c_fc"})
# Parameters of nn.MultiheadAttention stored directly on the module.
_MHA_LEAVES = {"in_proj_weight": ("qkv", "weight"), "in_proj_bias": ("qkv", "bias"),
               "q_proj_weight": ("q", "weight"), "k_proj_weight": ("k", "weight"), "v_proj_weight": ("v", "weight")}
# Learned K/V rows held by the attention module (nn.MultiheadAttention's add_bias_kv): appended to K
# and V, so part of the block's total (ParamBreakdown.kv_rows).
KV_ROW_LEAVES = frozenset({"bias_k", "bias_v"})
# Score bias tables held by the attention module (timm's Swin/BEiT attn.relative_position_bias_table,
# LeViT's attn.attention_biases) are its extra parameters (outside its total); the K/V rows ride
# along with them in the grouping. Each table has one entry per head (the scores' head axis) on the
# axis SCORE_TABLE_HEAD_AXIS gives: Swin's [(2W-1)², h], LeViT's [h, resolution²].
SCORE_TABLE_HEAD_AXIS = {"relative_position_bias_table": -1, "attention_biases": 0}
_EXTRA_LEAVES = KV_ROW_LEAVES | set(SCORE_TABLE_HEAD_AXIS)
# Modules that wrap a projection's Linear with a norm (timm's LinearNorm / ConvNorm: ``qkv.linear`` +
# ``qkv.bn``; inside a Sequential, ``proj.ln.linear``; MobileViTv2's ConvLayer ``qkv_proj.convolution``,
# a 1x1 convolution): the role is the wrapper's name.
WRAPPED_PROJECTIONS = frozenset({"linear", "convolution"})
_WRAPPERS = frozenset({"ln"})
# A per-role bias vector held on the attention module itself, beside a packed weight without a
# bias (DeBERTa's DisentangledSelfAttention: in_proj + q_bias, v_bias): that role's bias.
_ROLE_BIAS_LEAVES = {"q_bias": "q", "k_bias": "k", "v_bias": "v"}
# Score bias modules under the attention module: T5's relative_attention_bias Embedding,
# transformers' Swin/Swinv2/Donut relative_position_bias (its table).
_EXTRA_MODULES = frozenset({"relative_attention_bias", "relative_position_bias"})
# A learned query held beside the attention module (on its parent or on itself): SigLIP's MAP head
# ``head.probe`` [1, 1, d], Perceiver-style ``latents``, Q-Former's ``query_tokens``. Q is projected
# from it and K/V from the sequence: the block reads a source Q does not, so it is cross-attention
# (what a graph of the same model shows).
_LEARNED_QUERY_LEAVES = frozenset({"probe", "latents", "latent", "query_tokens"})
_WEIGHT_LEAVES = frozenset({"weight", "kernel", "w"})
_BIAS_LEAVES = frozenset({"bias", "b"})


@dataclass(frozen=True)
class RoleWeights:
    role: str  # "q", "k", "v", "o", "qkv", "kv"
    module: str  # module path that applies the weight
    weight: WeightMeta
    bias: WeightMeta | None
    bias_share: tuple[int, int] = (1, 1)  # this role's part of the bias (nn.MultiheadAttention in_proj_bias)
    # A BatchNorm right after a bias-free projection (timm's LinearNorm: ``.linear`` then ``.bn``): its
    # scale and shift, counted as the projection's bias (what a graph shows once the norm is folded).
    norm: tuple[WeightMeta, ...] = ()


# Module names of latent attention (DeepSeek-V2/V3's MLA, as transformers and DeepSeek's own code
# name them): each part's role in the block (``LatentParts``).
LATENT_MODULES = {"q_a_proj": "q_down", "q_a_layernorm": "q_norm", "q_b_proj": "q_up",
                  "kv_a_proj_with_mqa": "kv_down", "kv_a_layernorm": "kv_norm", "kv_b_proj": "kv_up",
                  # DeepSeek's own inference code and Mistral's checkpoints (Mistral-Large-4)
                  "wq_a": "q_down", "q_a_norm": "q_norm", "wq_b": "q_up",
                  "wkv_a": "kv_down", "wkv_a_with_mqa": "kv_down", "kv_a_norm": "kv_norm", "wkv_b": "kv_up"}


@dataclass(frozen=True)
class HeadNorm:
    """A module under the attention module that holds a vector (or one per head) and is none of its
    projections: a candidate norm of Q or K (Qwen3's q_norm, HunYuan's query_layernorm, OLMo 2's
    whole-width k_norm, Cohere's [heads, d_k] q_norm, diffusers' norm_q). Whether it is one is
    decided by its width once the block's d_k and widths are (``static.assemble``)."""

    module: str
    side: str | None  # "q" or "k" as its name says (a q/query or k/key word), None when it says neither
    weight: WeightMeta
    bias: WeightMeta | None

    @property
    def params(self) -> int:
        return self.weight.numel + (self.bias.numel if self.bias is not None else 0)


# The words of a module name that say which of Q and K a norm applies to (q_norm, query_layernorm,
# norm_q, norm_added_k, q_ln); a word "q"/"k" followed by a norm word written together (qnorm).
_SIDE_WORDS = {"q": "q", "query": "q", "queries": "q", "k": "k", "key": "k", "keys": "k"}
_NORM_WORDS = ("norm", "layernorm", "rmsnorm", "ln")


def norm_side(module: str) -> str | None:
    """"q" or "k" when a word of the module's last name says so (both or neither: None)."""
    sides = set()
    for word in re.split(r"[^a-z0-9]+", module.rpartition(".")[2].lower()):
        side = _SIDE_WORDS.get(word)
        if side is None and word[:1] in ("q", "k") and word[1:] in _NORM_WORDS:
            side = word[0]
        if side is not None:
            sides.add(side)
    return sides.pop() if len(sides) == 1 else None


@dataclass(frozen=True)
class LatentParts:
    """The weights of a latent-attention module besides Q's up-projection and O
    (``mhainspect.matchers.latent``)."""

    kv_down: RoleWeights  # the latent and the rotary key, from the input (kv_a_proj_with_mqa)
    kv_up: RoleWeights | None = None  # per head K's non-rotary rows then V's, from the latent (kv_b_proj)
    k_up: RoleWeights | None = None  # a per-head K up-projection [h, rank, nope] (GGUF attn_k_b)
    v_up: RoleWeights | None = None  # a per-head V up-projection [h, v, rank] (GGUF attn_v_b)
    q_down: RoleWeights | None = None  # Q's latent from the input (q_a_proj); None: Q projected directly
    norms: tuple[WeightMeta, ...] = ()  # the latents' norms (q_a_layernorm, kv_a_layernorm): weights, biases


@dataclass(frozen=True)
class IndexerParts:
    """A sub-module of an attention module with a K projection of its own and no V: it scores keys
    without reading values, so it is no attention of its own but a sparse-attention indexer that
    chooses the keys its parent reads (DeepSeek-V3.2's ``indexer``: wq_b, wk, k_norm, weights_proj).
    Whether its key reads the block's input is checked once the block's width is known
    (``matchers.indexer``)."""

    module: str
    key: RoleWeights  # its K projection: the key it caches
    projections: tuple[RoleWeights, ...]  # its other projections (its Q, the head weights)
    tensors: tuple[WeightMeta, ...]  # every tensor of its child modules (weights, biases, norms)


@dataclass(frozen=True)
class GroupedBlock:
    """Projections of one attention block found by names; widths not yet split for packed weights."""

    name: str  # common module prefix of its projections
    owner: str  # the module holding Q/K/V (where head attributes live)
    roles: tuple[RoleWeights, ...]
    extras: tuple[WeightMeta, ...]
    cross: bool = False
    # (role, bias vector) of per-role biases held on the owner (q_bias, v_bias): each is that
    # role's whole bias, added to its part of a packed weight.
    role_biases: tuple[tuple[str, WeightMeta], ...] = ()
    latent: LatentParts | None = None  # latent attention: its down- and up-projections beside Q and O
    learned_query: WeightMeta | None = None  # the learned query Q is projected from (then cross is True)
    head_norms: tuple[HeadNorm, ...] = ()  # candidate Q/K norms held by the attention module (``HeadNorm``)
    # The block whose K/V this one reads (a KV-sharing layer: its K/V roles are that block's weights).
    kv_from: str | None = None
    indexer: IndexerParts | None = None  # a sparse-attention indexer under the module (``IndexerParts``)
    # Projections named as a gate held by the module (or by the wrapper of its O): candidate output
    # gates, taken when their widths fit (``static.assemble``).
    gates: tuple[RoleWeights, ...] = ()
    # The parameters held under the attention module that no part above claims (score terms, sinks,
    # side convolutions): the block's extra, less the head norms and the gate ``static.assemble`` takes.
    others: tuple[WeightMeta, ...] = ()

    def role(self, role: str) -> RoleWeights | None:
        return next((r for r in self.roles if r.role == role), None)

    def role_bias(self, role: str) -> WeightMeta | None:
        return next((b for r, b in self.role_biases if r == role), None)


def _split(name: str) -> list[str]:
    if "/" not in name and ":" not in name:  # nearly every name: no TensorFlow-style path to rewrite
        return name.split(".")
    return name.replace("/", ".").replace(":0", "").split(".")


def _scope_leaf(name: str) -> tuple[str, str]:
    """(module path, last component) of a tensor name, as ``_split`` reads it."""
    if "/" not in name and ":" not in name:
        scope, _, leaf = name.rpartition(".")
        return scope, leaf
    parts = _split(name)
    return ".".join(parts[:-1]), parts[-1]


def is_kv_row(name: str) -> bool:
    """A learned K/V row (bias_k/bias_v) among a block's extras: in the block's total, where a score
    table is not."""
    return _scope_leaf(name)[1] in KV_ROW_LEAVES


# Role by lower-cased module name; where the sets overlap, the earlier role wins (q, k, v, qkv, o).
_ROLES = {name: role for role, names in (("o", O_NAMES), ("qkv", PACKED_NAMES), ("kv", KV_PACKED_NAMES),
                                         ("v", V_NAMES), ("k", K_NAMES),
                                         ("q", Q_NAMES)) for name in names}


def _role_of(component: str) -> str | None:
    return _ROLES.get(component.lower())


def _common_prefix(paths: Iterable[str]) -> str:
    return ".".join(common_prefix([p.split(".") if p else [] for p in paths]))


def group_attention(weights: Mapping[str, WeightMeta], kv_source: Callable[[str], str | None] | None = None
                    ) -> tuple[GroupedBlock, ...]:
    """Group weights into attention blocks by module prefix and role names, in name order.

    ``kv_source``: module path -> the module whose K/V cache it reads, where a config says so (a
    KV-sharing layer, ``layer_types.kv_sources``). Such a module holding Q and no K/V of its own is a
    block whose K/V roles are its source block's weights (counted there once, ``count_shared_once``)."""
    found = _by_module(weights)
    kids_of = _children(found.modules)
    latent_owners = {p for p, k in kids_of.latent.items() if "kv_down" in k and "kv_up" in k}
    owners = set(kids_of.roles) | set(found.mha) | latent_owners
    indexers = _indexers(kids_of, found, owners)
    wrapped = _wrapped_outputs(kids_of, owners)
    blocks: list[GroupedBlock] = []
    by_owner: dict[str, GroupedBlock] = {}
    for owner in sorted(owners - {i.module for i in indexers.values()}, key=natural_key):
        kids = kids_of.roles.get(owner, {})
        latent = (_latent_parts(kids_of.latent[owner], kids, found.role_weights, found.modules)
                  if owner in latent_owners else None)
        roles = [latent[0]] if latent is not None else _roles(owner, kids, found)
        kv_from = None
        if roles is None and kv_source is not None:
            roles, kv_from = _borrowed_kv(owner, kids, found, by_owner, kv_source(owner))
        if roles is None:
            continue
        o_path = kids.get("o")
        if o_path is None:
            o_path = _bert_output(owner, found.modules)
        if o_path is None:
            o_path = wrapped.get(owner)
        if o_path is None:
            o_path = _output_by_shape(owner, roles, set(kids.values()), found.modules)
        if o_path is not None:
            roles.append(found.role_weights("o", o_path))
        gates = _gates(owner, o_path, kids_of, found)
        # a block reading another's K/V is named by the modules it holds (Q, O), not those it borrows
        name = _common_prefix(r.module for r in roles if kv_from is None or r.role in ("q", "o")) or owner
        block_extras = tuple(found.extras.get(owner, []) + (found.extras.get(name, []) if name != owner else []))
        own_biases = tuple(rb for rb in found.role_biases.get(owner, []) if _bias_free(roles, rb[0]))
        if latent is not None:  # the block spans the whole module, its down-projections too
            name = owner
        query = _learned_query(owner, roles, found.queries)
        blocks.append(GroupedBlock(name, owner, tuple(roles), block_extras, cross_by_name(owner) or query is not None,
                                   own_biases, latent[1] if latent is not None else None, query,
                                   kids_of.head_norms(owner, found.modules), kv_from, indexers.get(owner), gates))
        by_owner[owner] = blocks[-1]
    return _with_leftovers(weights, _with_enclosing_extras(blocks, found.extras))


def _indexers(kids_of: _Children, found: _ByModule, owners: set[str]) -> dict[str, IndexerParts]:
    """By attention module, the sub-module that is its indexer (``IndexerParts``): a child of a
    candidate block's module holding a K projection and no V (nor a packed one), beside the block's
    own Q (a Q projection, a packed one, latent parts or nn.MultiheadAttention's weights: a module
    whose Q and K sit in a child, Zaya's ``qkv_proj``, has no indexer there). Its tensors are those
    of its child modules."""
    out: dict[str, IndexerParts] = {}
    for path, kids in kids_of.roles.items():
        parent = path.rpartition(".")[0]
        if "k" not in kids or any(r in kids for r in ("v", "qkv", "kv")) or parent not in owners:
            continue
        own = kids_of.roles.get(parent, {})
        if not ("q" in own or "qkv" in own or parent in found.mha or "kv_down" in kids_of.latent.get(parent, {})):
            continue
        # its latent-named children too (DeepSeek's ``wq_b``: the indexer's own Q up-projection)
        children = sorted({*kids.values(), *kids_of.others.get(path, ()), *kids_of.latent.get(path, {}).values()},
                          key=natural_key)
        key = found.role_weights("k", kids["k"])
        others = tuple(found.role_weights("q", c) for c in children
                       if c != kids["k"] and len(found.modules[c]["weight"].shape) == 2)
        tensors = tuple(t for c in children for t in found.modules[c].values())
        out[parent] = IndexerParts(path, key, others, tensors)
    return out


def _wrapped_outputs(kids_of: _Children, owners: set[str]) -> dict[str, str]:
    """By attention module, an O-named projection held by a child of it that holds no Q, K or V: an
    output wrapper (NeoMME's ``output_projection.o_proj``, beside its ``gate_proj``)."""
    out: dict[str, str] = {}
    for path, kids in kids_of.roles.items():
        parent = path.rpartition(".")[0]
        if parent in owners and set(kids) == {"o"}:
            out.setdefault(parent, kids["o"])
    return out


def gate_named(module: str) -> bool:
    """A module whose last name says gate (``gate_proj``, ``g_proj``, ``attn_gate``, ``output_gate``)."""
    last = module.rpartition(".")[2].lower()
    return last in GATE_NAMES or "gate" in re.split(r"[^a-z0-9]+", last)


def _gates(owner: str, o_path: str | None, kids_of: _Children, found: _ByModule) -> tuple[RoleWeights, ...]:
    """The 2-D projections named as a gate held by the attention module, or beside its O in an
    output wrapper (``_wrapped_outputs``)."""
    scopes = [owner]
    if o_path is not None and (wrapper := o_path.rpartition(".")[0]) != owner and wrapper.rpartition(".")[0] == owner:
        scopes.append(wrapper)
    return tuple(found.role_weights("gate", p) for scope in scopes for p in kids_of.others.get(scope, ())
                 if gate_named(p) and len(found.modules[p]["weight"].shape) == 2)


def _borrowed_kv(owner: str, kids: Mapping[str, str], found: _ByModule, by_owner: Mapping[str, GroupedBlock],
                 source: str | None) -> tuple[list[RoleWeights] | None, str | None]:
    """(Q of ``owner`` + the K/V roles of the block at ``source``, that block's name) for a module that
    holds Q but no K/V and reads ``source``'s cache; (None, None) when that is not so (no source
    block, a source without separate or jointly packed K/V: a packed QKV cannot lend its K/V)."""
    src = by_owner.get(source) if source is not None else None
    if src is None or "q" not in kids or any(r in kids for r in ("k", "v", "kv", "qkv")):
        return None, None
    kv = [r for r in src.roles if r.role in ("k", "v", "kv")]
    if not kv or src.latent is not None or src.kv_from is not None:
        return None, None
    return [found.role_weights("q", kids["q"]), *kv], src.name


def cross_by_name(owner: str) -> bool:
    """A weight-only block's kind by its module's name: cross-attention when named so (BERT's
    crossattention, T5's EncDecAttention, BART's encoder_attn, cross_attn); a learned query beside
    it (``_learned_query``) says cross too."""
    low = owner.lower().replace("_", "")  # cross_attention, crossattention, cross_attn alike
    return any(s in low for s in ("crossattention", "encdecattention", "encoderattn", "crossattn"))


@dataclass(frozen=True)
class _ByModule:
    """A weight list by module: Linear-style weights and biases, nn.MultiheadAttention's own
    parameters, extra tables, per-role bias vectors and learned queries, each under the module
    that holds it."""

    modules: dict[str, dict[str, WeightMeta]]  # module path -> {"weight": meta, "bias": meta}
    mha: dict[str, dict[tuple[str, str], WeightMeta]]
    extras: dict[str, list[WeightMeta]]
    role_biases: dict[str, list[tuple[str, WeightMeta]]]
    queries: dict[str, WeightMeta]

    def role_weights(self, role: str, path: str) -> RoleWeights:
        t = self.modules[path]
        bias = t.get("bias")
        norm: tuple[WeightMeta, ...] = ()
        wrapper, _, last = path.rpartition(".")
        if bias is None and last in WRAPPED_PROJECTIONS:  # timm's LinearNorm: the norm beside the Linear
            bn = self.modules.get(wrapper + ".bn", {})
            norm = tuple(m for k in ("weight", "bias") if (m := bn.get(k)) is not None and len(m.shape) == 1)
        return RoleWeights(role, path, t["weight"], bias, norm=norm)


def _by_module(weights: Mapping[str, WeightMeta]) -> _ByModule:
    found = _ByModule({}, {}, {}, {}, {})
    for name, meta in weights.items():
        scope, leaf = _scope_leaf(name)
        low = leaf.lower()
        parent, dot, owner = scope.rpartition(".")
        if low in _LEARNED_QUERY_LEAVES and len(meta.shape) >= 2:
            found.queries.setdefault(scope, meta)
        if leaf in _MHA_LEAVES:
            found.mha.setdefault(scope, {})[_MHA_LEAVES[leaf]] = meta
        elif (owner if dot else scope) in _EXTRA_MODULES and scope:
            found.extras.setdefault(parent, []).append(meta)
        elif leaf in _EXTRA_LEAVES:
            found.extras.setdefault(scope, []).append(meta)
        elif low in _ROLE_BIAS_LEAVES and len(meta.shape) == 1:
            found.role_biases.setdefault(scope, []).append((_ROLE_BIAS_LEAVES[low], meta))
        elif low in _WEIGHT_LEAVES or (meta.quant is not None and meta.quant.role is QuantRole.WEIGHT):
            # A quantized Linear's weight by what the loader found (GPTQ/AWQ qweight, weight_packed).
            found.modules.setdefault(scope, {})["weight"] = meta
        elif low in _BIAS_LEAVES:
            found.modules.setdefault(scope, {})["bias"] = meta
    return found


@dataclass(frozen=True)
class _Children:
    """The modules with a weight, by parent: by role (q, k, v, o, qkv), by latent part
    (``LATENT_MODULES``), and the others (where a block's candidate Q/K norms are, ``head_norms``)."""

    roles: dict[str, dict[str, str]]
    latent: dict[str, dict[str, str]]
    others: dict[str, list[str]]

    def head_norms(self, owner: str, modules: Mapping[str, Mapping[str, WeightMeta]]) -> tuple[HeadNorm, ...]:
        """The candidate Q/K norms held by the attention module ``owner``: told for a block's
        module only, not for every module of the model (a mixture of experts has tens of thousands)."""
        return tuple(HeadNorm(p, norm_side(p), modules[p]["weight"], modules[p].get("bias"))
                     for p in self.others.get(owner, ()) if _vector_module(modules[p]))


def _children(modules: Mapping[str, Mapping[str, WeightMeta]]) -> _Children:
    out = _Children({}, {}, {})
    worded: set[str] = set()  # the parents of a module whose name's words may give a role (_roles_by_words)
    for path, tensors in modules.items():
        if "weight" not in tensors or not path:
            continue
        parent, _, last = path.rpartition(".")
        role = _ROLES.get(last.lower())  # _role_of, inline: asked for every module
        part = LATENT_MODULES.get(last)
        if part is not None:
            out.latent.setdefault(parent, {})[part] = path
        elif role is None:
            out.others.setdefault(parent, []).append(path)
            if _word_role(last) is not None:
                worded.add(parent)
        if role is None:
            # to_out.0 (diffusers): the output projection is the first item of a Sequential.
            if last.isdigit() and parent.rpartition(".")[2].lower() == "to_out":
                role, parent = "o", parent.rpartition(".")[0]
            # qkv.linear, proj.ln.linear (timm's LinearNorm, in a Sequential): the wrapper names the role.
            elif last in WRAPPED_PROJECTIONS:
                outer, _, name = parent.rpartition(".")
                if name in _WRAPPERS:
                    outer, _, name = outer.rpartition(".")
                role = _role_of(name)
                if role is not None:
                    parent = outer
        if role is not None:
            out.roles.setdefault(parent, {}).setdefault(role, path)
    _roles_by_words(out, modules, worded)
    _packed_by_shape(out, modules)
    return out


# The words of a projection's name that say its role where the whole name is no role name (CPM-Ant's
# ``project_q`` / ``attention_out``, NeMo's ``query_net`` / ``out_projection``), and the words that
# may stand beside them: what names a projection, not a norm or a gate (``q_norm``, ``k_gate``).
_ROLE_WORDS = {"q": "q", "query": "q", "k": "k", "key": "k", "v": "v", "value": "v", "o": "o", "out": "o",
               "output": "o"}
_PROJECTION_WORDS = frozenset({"proj", "project", "projection", "linear", "lin", "net", "layer", "dense", "fc",
                               "attention", "attn", "att", "w"})


_NOT_LETTERS = re.compile(r"[^a-z]+")


@lru_cache(maxsize=4096)  # asked per module (a mixture of experts: tens of thousands) of a handful of last names
def _word_role(last: str) -> str | None:
    """The role one word of a module's last name gives, when every other word names a projection."""
    words = [w for w in _NOT_LETTERS.split(last.lower()) if w]
    roles = [_ROLE_WORDS[w] for w in words if w in _ROLE_WORDS]
    if len(roles) != 1 or not all(w in _ROLE_WORDS or w in _PROJECTION_WORDS for w in words):
        return None
    return roles[0]


def _roles_by_words(out: _Children, modules: Mapping[str, Mapping[str, WeightMeta]], worded: set[str]) -> None:
    """Roles from the words of the projections' names, for a module whose children make Q, K and V
    only so (each role once): a single ``out_layer`` elsewhere is no output projection. ``worded``:
    the parents with such a child, found while the children were collected (the rest, a mixture of
    experts' thousands, are not read again)."""
    for parent, paths in list(out.others.items()):
        if parent not in worded:
            continue
        have = out.roles.get(parent, {})
        found: dict[str, list[str]] = {}
        for path in paths:
            role = _word_role(path.rpartition(".")[2])
            if role is not None and role not in have and len(modules[path]["weight"].shape) == 2:
                found.setdefault(role, []).append(path)
        if not found:  # no role by words here (an expert's gate/up/down): nothing to add
            continue
        if any(len(v) > 1 for v in found.values()) or not {"q", "k", "v"} <= set(have) | set(found):
            continue
        out.roles.setdefault(parent, {}).update({r: v[0] for r, v in found.items()})
        out.others[parent] = [p for p in paths if not any(p in v for v in found.values())]


def _packed_by_shape(out: _Children, modules: Mapping[str, Mapping[str, WeightMeta]]) -> None:
    """A module named as attention whose projections are an output projection and one other
    (Bark's ``att_proj``, HRM's ``gqkv_proj``): the other, when it reads O's output width and writes
    more than O reads (Q and K/V at least), is its packed Q/K/V projection, to be split by the head
    counts (``assembly.split_packed``), never evenly by default."""
    for parent, paths in out.others.items():
        have = out.roles.get(parent, {})
        if not _attention_named(parent, last_only=True) or set(have) - {"o"}:
            continue
        projections = [p for p in paths if linear_dims(modules[p]["weight"], p) is not None]
        # O by its role name, else the one projection whose name's words say output (Molmo 2's ``attn_out``)
        o_path = have.get("o") or _only([p for p in projections if _word_role(p.rpartition(".")[2]) == "o"])
        rest = [p for p in projections if p != o_path]
        o = linear_dims(modules[o_path]["weight"], o_path) if o_path is not None else None
        if len(rest) != 1 or o is None or o_path is None:
            continue
        dims = linear_dims(modules[rest[0]]["weight"], rest[0], packed=True)
        if dims is not None and dims[0] == o[1] and dims[1] > o[0] and (dims[1] - o[0]) % 2 == 0:
            have.update({"qkv": rest[0], "o": o_path})
            out.roles[parent] = have
            out.others[parent] = [p for p in paths if p not in (rest[0], o_path)]


def _only(items: list[str]) -> str | None:
    return items[0] if len(items) == 1 else None


def _vector_module(tensors: Mapping[str, WeightMeta]) -> bool:
    """A module holding a vector, or one vector per head ([heads, d]), and a bias like it: what a
    norm holds (a projection's weight is as wide as two activations, checked later by its widths)."""
    weight, bias = tensors["weight"], tensors.get("bias")
    return (weight.quant is None and 1 <= len(weight.shape) <= 2 and all(d > 0 for d in weight.shape)
            and (bias is None or bias.shape == weight.shape))


def _roles(owner: str, kids: Mapping[str, str], found: _ByModule) -> list[RoleWeights] | None:
    """The Q/K/V weights of the module ``owner`` by the first layout that fits; None when none does."""
    params = found.mha.get(owner, {})
    if ("qkv", "weight") in params:
        return [RoleWeights("qkv", owner, params[("qkv", "weight")], params.get(("qkv", "bias")))]
    if all((r, "weight") in params for r in ("q", "k", "v")):
        # Separate Q/K/V weights (kdim/vdim) share one packed in_proj_bias: a third each.
        bias = params.get(("qkv", "bias"))
        return [RoleWeights(r, owner, params[(r, "weight")], bias, (1, 3)) for r in ("q", "k", "v")]
    if all(r in kids for r in ("q", "k", "v")):
        return [found.role_weights(r, kids[r]) for r in ("q", "k", "v")]
    if "qkv" in kids and (_attention_named(owner) or kids["qkv"].rsplit(".", 1)[-1].lower() not in GENERIC_PACKED_NAMES):
        return [found.role_weights("qkv", kids["qkv"])]
    if "q" in kids and "kv" in kids and not any(r in kids for r in ("qkv", "k", "v")):
        return [found.role_weights(r, kids[r]) for r in ("q", "kv")]
    if "q" in kids and "qkv" not in kids and any(r in kids for r in ("k", "v")):
        return [found.role_weights(r, kids[r]) for r in ("q", "k", "v") if r in kids]
    return None


def _learned_query(owner: str, roles: list[RoleWeights], queries: Mapping[str, WeightMeta]) -> WeightMeta | None:
    """The learned query held on the attention module or its parent whose width is Q's input width."""
    q = next((r for r in roles if r.role in ("q", "qkv")), None)
    if q is None or not queries:
        return None
    dims = linear_dims(q.weight, q.module, packed=q.role == "qkv")
    parent = owner.rpartition(".")[0]
    for scope in (owner, parent):
        meta = queries.get(scope)
        if meta is not None and dims is not None and meta.shape[-1] == dims[0]:
            return meta
    return None


def _latent_parts(found: Mapping[str, str], kids: Mapping[str, str], rw: Callable[[str, str], RoleWeights],
                  modules: Mapping[str, Mapping[str, WeightMeta]]) -> tuple[RoleWeights, LatentParts] | None:
    """(Q, the rest) of a latent-attention module from its children by part (``LATENT_MODULES``),
    or None without a Q projection."""
    q = found.get("q_up") or kids.get("q")
    if q is None:
        return None
    norms = tuple(t for n in ("q_norm", "kv_norm") if n in found
                  for t in (modules[found[n]].get("weight"), modules[found[n]].get("bias")) if t is not None)
    return rw("q", q), LatentParts(rw("kv_down", found["kv_down"]), rw("kv_up", found["kv_up"]),
                                   q_down=rw("q_down", found["q_down"]) if "q_down" in found else None, norms=norms)


def _with_leftovers(weights: Mapping[str, WeightMeta], blocks: tuple[GroupedBlock, ...]) -> tuple[GroupedBlock, ...]:
    """Each block with the parameters its attention module holds that none of its parts claims
    (``GroupedBlock.others``): a tensor belongs to the nearest module above it that is a block's
    owner (a block nested in another keeps its own), when that module is named as attention (or is
    the ``self`` of one: BERT's ``attention.self``), so that a layer holding Q/K/V directly does not
    hand its MLP to the block."""
    by_owner = {b.owner: i for i, b in enumerate(blocks)
                if _attention_named(b.owner, last_only=True) or _attention_named(b.owner.rpartition(".")[0], last_only=True)}
    if not by_owner:
        return blocks
    claimed_modules: list[set[str]] = [set() for _ in blocks]
    claimed_names: list[set[str]] = [set() for _ in blocks]
    for i, b in enumerate(blocks):
        if i not in by_owner.values():
            continue
        latent = (b.latent.kv_down, b.latent.kv_up, b.latent.k_up, b.latent.v_up, b.latent.q_down) \
            if b.latent is not None else ()
        parts = [*b.roles, *latent]
        for rw in parts:
            if rw is None:
                continue
            claimed_names[i].update(t.name for t in (rw.weight, rw.bias, *rw.norm) if t is not None)
            if rw.module != b.owner:
                claimed_modules[i].add(rw.module)
        claimed_names[i].update(t.name for t in b.extras)
        claimed_names[i].update(t.name for _, t in b.role_biases)
        if b.latent is not None:
            claimed_names[i].update(t.name for t in b.latent.norms)
        if b.learned_query is not None:
            claimed_names[i].add(b.learned_query.name)
        if b.indexer is not None:
            claimed_modules[i].add(b.indexer.module)
    # The nearest owner above a tensor: its name's longest prefix that is an owner's path (a few
    # distinct path lengths: a slice and a lookup each, whatever the model's tensor count).
    lengths = sorted({len(o) for o in by_owner}, reverse=True)
    # A tensor under an owner holds the owner's last component and a dot after it: a substring test
    # per such word (a handful) passes over the rest (a mixture of experts' thousands) before the lookups.
    tails = tuple(sorted({o.rpartition(".")[2] + "." for o in by_owner}))
    others: dict[int, list[WeightMeta]] = {}
    owner_at = by_owner.get
    for name, meta in weights.items():
        path = name if "/" not in name and ":" not in name else ".".join(_split(name))  # TensorFlow-style names
        for tail in tails:
            if tail in path:
                break
        else:
            continue
        for n in lengths:
            if len(path) > n and path[n] == "." and (at := owner_at(path[:n])) is not None:
                break
        else:
            continue
        if not meta.is_parameter:
            continue
        i = at
        scope = path.rpartition(".")[0]
        if name in claimed_names[i] or _under(scope, claimed_modules[i]):
            continue
        others.setdefault(i, []).append(meta)
    if not others:
        return blocks
    return tuple(dataclasses.replace(b, others=tuple(others[i])) if i in others else b for i, b in enumerate(blocks))


def _under(scope: str, modules: set[str]) -> bool:
    """Whether ``scope`` is one of ``modules`` or below one."""
    path = scope
    while path:
        if path in modules:
            return True
        path = path.rpartition(".")[0]
    return False


def _with_enclosing_extras(blocks: list[GroupedBlock], extras: Mapping[str, list[WeightMeta]]
                           ) -> tuple[GroupedBlock, ...]:
    """A score bias table held above the attention module (transformers' BEiT/Data2Vec-vision keep
    ``layers.N.relative_position_bias`` on the layer and pass its bias to ``layers.N.attention``) is
    the extra of the one block under that module; a table above several blocks (shared by the
    layers) is no single block's."""
    attached = {p for b in blocks for p in (b.owner, b.name)}
    out = list(blocks)
    for scope in sorted(extras, key=natural_key):
        if scope in attached:
            continue
        under = [i for i, b in enumerate(out) if scope == "" or b.owner.startswith(scope + ".")]
        if len(under) == 1:
            b = out[under[0]]
            out[under[0]] = dataclasses.replace(b, extras=b.extras + tuple(extras[scope]))
    return tuple(out)


def ungrouped_attention(weights: Mapping[str, WeightMeta], blocks: Iterable[GroupedBlock]
                        ) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Modules named as attention (``attn``/``attention`` in the last component) holding two or more
    projection weights that no block covers: (module path, its projections), in name order. Their
    K/V are neither separate nor fused (latent K/V as DeepSeek's MLA): near misses, not blocks."""
    children: dict[str, set[str]] = {}
    for name, meta in weights.items():
        # The module named as attention is a component of the name: no "att" in it (and no ":0" that
        # _split drops), no such module (a mixture of experts' thousands pass here on one test).
        low = name.lower()
        if "att" not in low and ":0" not in low or len(meta.shape) not in (2, 3):
            continue
        scope, leaf = _scope_leaf(name)
        module, dot, projection = scope.rpartition(".")
        if not dot or leaf.lower() not in _WEIGHT_LEAVES:
            continue
        if len(meta.shape) == 3:
            # Projections stacked per expert ([experts, out, in]) in a sub-module of the attention module
            # (JetMoE's ``self_attention.experts.input_linear``: a mixture of attention heads)
            outer, dot, sub = module.rpartition(".")
            if not dot or not _attention_named(outer, last_only=True):
                continue
            module, projection = outer, f"{sub}.{projection}"
        owner = module.rpartition(".")[2].lower()  # the module holding the projection: named as attention?
        if "attn" in owner or "attention" in owner:
            children.setdefault(module, set()).add(projection)
    covered = [p for b in blocks for p in (b.name, b.owner)]
    out: list[tuple[str, tuple[str, ...]]] = []
    for path in sorted(children, key=natural_key):
        if len(children[path]) < 2:
            continue
        if any(c == path or c.startswith(path + ".") or path.startswith(c + ".") for c in covered):
            continue
        out.append((path, tuple(sorted(children[path]))))
    return tuple(out)


def sampling_pair(weights: Mapping[str, WeightMeta], module: str, projections: Iterable[str]
                  ) -> tuple[str, int, str, int] | None:
    """(offsets, their width, weights, their width) of two projections of ``module`` that read one
    input, the first exactly twice as wide as the second: the x and y offsets, and the weight, of
    each point a deformable attention samples per query (``sampling_offsets`` / ``attention_weights``
    of multiscale deformable attention, heads × levels × points). None when no pair fits or several do."""
    dims = {}
    for p in projections:
        if _role_of(p) is not None:  # value_proj, output_proj: the roles the sampled values pass through
            continue
        meta = weights.get(f"{module}.{p}.weight")
        d = linear_dims(meta, f"{module}.{p}") if meta is not None else None
        if d is not None:
            dims[p] = d
    pairs = [(a, b) for a in dims for b in dims if a != b and dims[a][0] == dims[b][0] and dims[a][1] == 2 * dims[b][1]]
    if len(pairs) != 1:
        return None
    a, b = pairs[0]
    return a, dims[a][1], b, dims[b][1]


def _attention_named(path: str, *, last_only: bool = False) -> bool:
    """True when a component of the module path (``last_only``: its last) names attention. Neither
    word holds a dot, so a search of the whole path is a search of every component (asked per module
    of a mixture of experts: one lower-casing and two substring tests, no split)."""
    low = (path.rpartition(".")[2] if last_only else path).lower()
    return "attn" in low or "attention" in low


def _bias_free(roles: Iterable[RoleWeights], role: str) -> bool:
    """True when ``role``'s projection (or the packed weight holding it) has no bias of its own."""
    r = next((x for x in roles if x.role == role), None) or next((x for x in roles if x.role == "qkv"), None)
    return r is not None and r.bias is None


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that puts layer.2 before layer.10."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name) if p)


def _bert_output(owner: str, modules: Mapping[str, Mapping[str, WeightMeta]]) -> str | None:
    """BERT-style layout: Q/K/V under ``X.self`` (or ``X.attention``), O at ``X.output.dense``."""
    parts = owner.split(".")
    if len(parts) < 2:
        return None
    gp = ".".join(parts[:-1])
    for cand in (f"{gp}.output.dense", f"{gp}.output.o_proj", f"{gp}.dense"):
        if cand in modules and "weight" in modules[cand]:
            return cand
    return None


def _output_by_shape(owner: str, roles: list[RoleWeights], taken: set[str],
                     modules: Mapping[str, Mapping[str, WeightMeta]]) -> str | None:
    """The output projection of a block whose O has no role name (BLIP's ``projection``, InternVL's
    ``projection_layer``, BigBird-Pegasus' ``output`` beside ``self``), by shape: the one projection
    held by the attention module (else by its parent, beside it) that reads Q's width and writes
    the block's input width. None when no projection or more than one fits."""
    q = next((r for r in roles if r.role in ("q", "qkv")), None)
    dims = linear_dims(q.weight, q.module, packed=q.role == "qkv") if q is not None else None
    if q is None or dims is None:
        return None
    d_model, width = dims

    def reads_q(path: str) -> bool:
        meta = modules[path].get("weight")
        io = linear_dims(meta, path) if meta is not None else None
        if io is None or io[1] != d_model:
            return False
        if q.role == "q":
            return io[0] == width
        return 0 < io[0] < width and (width - io[0]) % 2 == 0  # packed: Q's part, K and V the rest

    used = taken | {r.module for r in roles}
    for scope in (owner, owner.rpartition(".")[0]):
        if not scope:
            break
        fits = [p for p in modules if p.rpartition(".")[0] == scope and p not in used and reads_q(p)]
        if fits:
            return fits[0] if len(fits) == 1 else None
    return None


def pointwise_conv(meta: WeightMeta) -> bool:
    """A convolution weight one position wide on every spatial axis, [out, in, 1, ...] (Conv1d kernel
    1, Conv2d 1x1): a projection of the channels, as a Linear [out, in] is."""
    shape = meta.shape
    return len(shape) >= 3 and meta.layout in ("", "out_in") and all(d == 1 for d in shape[2:])


def linear_dims(meta: WeightMeta, module: str, *, packed: bool = False) -> tuple[int, int] | None:
    """(in_features, out_features) of a 2-D projection weight or a pointwise convolution's; None
    for other ranks.

    Without a recorded layout: a packed [Q; K; V] weight is wider out than in (it holds at least
    the model width plus two heads), which tells GPTBigCode's nn.Linear ``c_attn`` [(h + 2)·d, E]
    from GPT-2's Conv1D ``c_attn`` [E, 3E]; otherwise the name decides (Conv1D names, ``kernel``)."""
    if pointwise_conv(meta):
        return meta.shape[1], meta.shape[0]
    if len(meta.shape) != 2:
        return None
    a, b = meta.shape
    layout = meta.layout
    if not layout and packed and a != b:
        layout = "in_out" if b > a else "out_in"
    if not layout:
        leaf = _split(meta.name)[-1].lower()
        last = module.split(".")[-1].lower() if module else ""
        layout = "in_out" if (leaf == "kernel" or last in CONV1D_NAMES) else "out_in"
    return (a, b) if layout == "in_out" else (b, a)


def kernel_head_split(meta: WeightMeta, role: str) -> tuple[int, int, int, int] | None:
    """Keras-style 3-D kernels: Q/K/V ``[in, heads, head_dim]`` (``[heads, in, head_dim]`` where the
    reader marked the layout HEADS_FIRST), O ``[heads, head_dim, out]``.

    Returns (in_features, out_features, heads, head_dim); None for other ranks and for a pointwise
    convolution's [out, in, 1] (a head one element wide is no Keras kernel)."""
    if len(meta.shape) != 3 or pointwise_conv(meta):
        return None
    if role == "o":
        h, d, out = meta.shape
        return h * d, out, h, d
    if meta.layout == HEADS_FIRST:
        h, d_in, d = meta.shape
        return d_in, h * d, h, d
    d_in, h, d = meta.shape
    return d_in, h * d, h, d


def projection(role: str, rw: RoleWeights, in_f: int | None, out_f: int | None, share: tuple[int, int] = (1, 1),
               own_bias: WeightMeta | None = None) -> Projection:
    """A Projection for ``role`` taking ``share`` (numerator, denominator) of a packed weight;
    ``own_bias``: the role's own bias vector (q_bias), used whole, when the weight has no bias; a
    norm after a bias-free weight (``RoleWeights.norm``): its scale and shift, this share of them."""
    num, den = share
    if rw.bias is None and own_bias is None and rw.norm:
        return Projection(role, rw.weight.name, in_f, out_f, rw.weight.numel * num // den, rw.norm[-1].name,
                          sum(t.numel for t in rw.norm) * num // den, rw.module)
    if rw.bias is None and own_bias is not None:
        return Projection(role, rw.weight.name, in_f, out_f, rw.weight.numel * num // den, own_bias.name,
                          own_bias.numel, rw.module)
    bn, bd = rw.bias_share
    bias_params = rw.bias.numel * num * bn // (den * bd) if rw.bias is not None else 0
    return Projection(role, rw.weight.name, in_f, out_f, rw.weight.numel * num // den,
                      rw.bias.name if rw.bias is not None else None, bias_params, rw.module)
