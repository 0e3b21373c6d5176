"""The BERT family's torch twin: transformers' ``BertModel`` and its ``BertFor*`` heads, written out.

Same arithmetic as transformers', in the same order (word + token-type embeddings, then
positions; post-norm blocks; a tanh pooler on the first token), with zoo's shared blocks:
``SelfAttention`` holds query, key and value as one (3H, H) ``in_proj_weight`` (transformers'
``attention.self.query/key/value`` stacked; ``architectures.bert.formats`` renames), and the
feed-forward net is the shared ``Mlp`` (``fc1`` is transformers' ``intermediate.dense``,
``fc2`` its ``output.dense``). Initialised as transformers' ``BertPreTrainedModel._init_weights``:
every weight matrix and embedding N(0, initializer_range^2), the padding row zero, biases
zero, LayerNorm 1 and 0.
"""

from __future__ import annotations

import torch
from torch import nn

from architectures.bert.config import BertConfig, input_shapes_message, token_types_message
from zoo.nn.errors import InputError, sequence_length_message
from zoo.nn.torch import Embedding, Mlp, SelfAttention, blocked_mask
from zoo.nn.torch.heads import ClassificationHead, MaskedLMHead, mean_pool
from zoo.nn.torch.remat import checkpointed_call


class Embeddings(nn.Module):
    """(N, T) ids -> (N, T, H): word + token type + position, LayerNorm, dropout."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        h = cfg.hidden_size
        self.word = Embedding(cfg.vocab_size, h, padding_idx=cfg.pad_token_id)
        self.position = nn.Embedding(cfg.max_len, h)
        self.token_type = nn.Embedding(cfg.type_vocab_size, h)
        self.norm = nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def forward(self, ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        steps = ids.shape[1]
        types = torch.zeros_like(ids) if token_type_ids is None else token_type_ids
        x = self.word(ids) + self.token_type(types)  # transformers' order of the sums
        x = x + self.position.weight[:steps]
        return self.dropout(self.norm(x))


class Block(nn.Module):
    """Post-norm: ``norm1(x + attention(x))``, then ``norm2(x + mlp(x))``."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        h = cfg.hidden_size
        self.attn = SelfAttention(h, cfg.num_heads, dropout=cfg.attention_dropout)
        self.dropout = nn.Dropout(cfg.hidden_dropout)  # transformers' attention.output.dropout
        self.norm1 = nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        self.mlp = Mlp(h, cfg.intermediate_size, activation="gelu", output_dropout=cfg.hidden_dropout)
        self.norm2 = nn.LayerNorm(h, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor, blocked: torch.Tensor | None = None) -> torch.Tensor:
        x = self.norm1(x + self.dropout(self.attn(x, blocked)))
        return self.norm2(x + self.mlp(x))


class Bert(nn.Module):
    """(N, T) int64 token ids -> the task's output:

    - ``features``: the last hidden state (N, T, H), as ``BertModel(...).last_hidden_state``;
    - ``classification``: (N, num_classes) logits from the pooler output;
    - ``token_classification``: (N, T, num_classes) logits;
    - ``masked_language_modeling``: (N, T, vocab_size) logits.

    ``padding_mask`` (N, T) bool marks padding with True (the opposite of transformers'
    ``attention_mask``): no token attends to a padding token. Padding tokens' own outputs
    are not transformers' (zoo's mask lets a padding token attend to itself, so no row of the
    softmax is empty); compare and train on real tokens only. ``token_type_ids`` (N, T)
    defaults to zeros (segment A). Ids outside the vocabulary, token types outside
    ``type_vocab_size`` and sequences longer than ``max_len`` are refused with
    :class:`zoo.nn.errors.InputError`, in the Keras twin's words.

    With ``grad_checkpointing`` on, training keeps only each block's input for backward and
    recomputes the block there (dropout masks included: torch replays the RNG state).
    """

    grad_checkpointing: bool = False

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.zoo_config = cfg
        h = cfg.hidden_size
        self.embeddings = Embeddings(cfg)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.pooler = nn.Linear(h, h) if cfg.has_pooler else None
        std = cfg.initializer_range
        if cfg.task in ("classification", "token_classification"):
            self.head = ClassificationHead(h, cfg.num_classes, cfg.head_dropout, init_std=std)
        elif cfg.task == "masked_language_modeling":
            self.head = MaskedLMHead(h, cfg.vocab_size, cfg.layer_norm_eps, init_std=std)
        else:
            self.head = None
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """transformers' ``_init_weights`` for the backbone (the heads initialise themselves)."""
        std = self.zoo_config.initializer_range
        for module in (self.embeddings.word, self.embeddings.position, self.embeddings.token_type):
            nn.init.normal_(module.weight, std=std)
        if self.embeddings.word.padding_idx is not None:
            self.embeddings.word.weight[self.embeddings.word.padding_idx].zero_()
        linears = [self.pooler] if self.pooler is not None else []
        for block in self.blocks:
            nn.init.normal_(block.attn.in_proj_weight, std=std)  # transformers' query, key, value
            nn.init.zeros_(block.attn.in_proj_bias)
            linears += [block.attn.out_proj, block.mlp.fc1, block.mlp.fc2]
        for linear in linears:
            nn.init.normal_(linear.weight, std=std)
            nn.init.zeros_(linear.bias)

    def forward_features(
        self,
        ids: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The last hidden state (N, T, H): ``BertModel``'s ``last_hidden_state``."""
        self._check(ids, padding_mask, token_type_ids)
        h = self.embeddings(ids, token_type_ids)
        blocked = blocked_mask(ids.shape[1], padding_mask, device=ids.device)
        checkpointing = self.grad_checkpointing and self.training and torch.is_grad_enabled()
        for block in self.blocks:
            h = checkpointed_call(block, h, blocked) if checkpointing else block(h, blocked)
        return h

    def pool(self, h: torch.Tensor) -> torch.Tensor:
        """The pooler output (N, H): tanh(dense(first token)), ``BertModel``'s ``pooler_output``."""
        if self.pooler is None:
            raise ValueError(
                f"this {self.zoo_config.task} model has no pooler (transformers' "
                "BertFor{TokenClassification,MaskedLM} have none); use mean_pool for a sentence embedding"
            )
        return torch.tanh(self.pooler(h[:, 0]))

    def mean_pool(self, h: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """A sentence embedding (N, H): the mean of the real tokens' hidden states."""
        return mean_pool(h, padding_mask)

    def forward_head(self, h: torch.Tensor) -> torch.Tensor:
        task = self.zoo_config.task
        if task == "features":
            return h
        if task == "classification":
            return self.head(self.pool(h))
        if task == "masked_language_modeling":
            return self.head(h, self.embeddings.word.weight)
        return self.head(h)

    def forward(
        self,
        ids: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.forward_head(self.forward_features(ids, padding_mask, token_type_ids))

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def _check(self, ids, padding_mask, token_type_ids) -> None:
        cfg = self.zoo_config
        if ids.ndim != 2:
            raise InputError(f"token ids must be (N, T) integers; got shape {tuple(ids.shape)}")
        if ids.shape[1] > cfg.max_len:
            raise InputError(sequence_length_message(cfg.max_len, ids.shape[1]))
        for what, extra in (("padding_mask", padding_mask), ("token_type_ids", token_type_ids)):
            if extra is not None and tuple(extra.shape) != tuple(ids.shape):
                raise InputError(input_shapes_message(what, ids.shape, extra.shape))
        if token_type_ids is None:
            return
        inside = (token_type_ids >= 0) & (token_type_ids < cfg.type_vocab_size)
        if token_type_ids.device.type != "cpu" or torch.compiler.is_compiling():
            torch._assert_async(inside.all(), token_types_message(cfg.type_vocab_size))
        elif not bool(inside.all()):
            raise InputError(token_types_message(cfg.type_vocab_size))


def build(cfg: BertConfig) -> Bert:
    return Bert(cfg)
