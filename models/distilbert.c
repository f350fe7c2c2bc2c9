/* distilbert.c: the DistilBERT row (model_type "distilbert", as
 * sentence-transformers' distilbert-base models): DistilBertConfig's keys
 * (dim, n_layers, n_heads, hidden_dim, activation), DistilBertModel's
 * tensor names (also under DistilBertFor*'s "distilbert." prefix), no token
 * types, absolute positions from 0, BERT's WordPiece tokens. The layers are
 * BERT's (post-LayerNorm, GELU MLP), so the row is data alone: no hook.
 */
#include "models/arch.h"

const enc_arch enc_arch_distilbert = {
    .model_type = "distilbert",
    .prefix = "distilbert.",
    .keys = {.vocab = "vocab_size", .hidden = "dim", .layers = "n_layers", .heads = "n_heads",
             .intermediate = "hidden_dim", .max_positions = "max_position_embeddings",
             .act = "activation"},
    .emb = {.word = "embeddings.word_embeddings.weight",
            .pos = "embeddings.position_embeddings.weight", .ln = "embeddings.LayerNorm"},
    .layers = "transformer.layer",
    .layer = {.q = "attention.q_lin", .k = "attention.k_lin", .v = "attention.v_lin",
              .o = "attention.out_lin", .ln1 = "sa_layer_norm", .inter = "ffn.lin1",
              .out = "ffn.lin2", .ln2 = "output_layer_norm"},
    /* DistilBertForSequenceClassification: ReLU(pre_classifier), classifier */
    .head = {.dense = "pre_classifier", .out = "classifier", .act = ENC_HEAD_RELU},
};
