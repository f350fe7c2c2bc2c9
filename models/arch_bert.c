/* arch_bert.c: the BERT row (model_type "bert", as all-MiniLM-L6-v2):
 * config.json's BertConfig keys, BertModel's tensor names (also found under
 * BertFor*'s "bert." prefix), token types (the first row added to every
 * token), absolute positions from 0. Everything else is the shared
 * encoder's default (models/encoder.c). */
#include <string.h>

#include "models/encoder_internal.h"

/* BertConfig's fields beyond the numbers: only absolute positions are served. */
static mt_status bert_read_config(const cJSON *j, const char *path, enc_config *c, mt_err *err)
{
    const cJSON *pet = cJSON_GetObjectItemCaseSensitive(j, "position_embedding_type");
    if (pet && (!cJSON_IsString(pet) || strcmp(pet->valuestring, "absolute") != 0))
        return mt_fail(err, MT_EUNSUPPORTED, "%s: position_embedding_type must be \"absolute\"",
                       path);
    return MT_OK;
}

const enc_arch enc_arch_bert = {
    .model_type = "bert",
    .prefix = "bert.",
    .keys = {.vocab = "vocab_size", .hidden = "hidden_size", .layers = "num_hidden_layers",
             .heads = "num_attention_heads", .intermediate = "intermediate_size",
             .max_positions = "max_position_embeddings", .act = "hidden_act",
             .eps = "layer_norm_eps", .type_vocab = "type_vocab_size"},
    .emb = {.word = "embeddings.word_embeddings.weight",
            .pos = "embeddings.position_embeddings.weight",
            .type = "embeddings.token_type_embeddings.weight", .ln = "embeddings.LayerNorm"},
    .layers = "encoder.layer",
    .layer = {.q = "attention.self.query", .k = "attention.self.key",
              .v = "attention.self.value", .o = "attention.output.dense",
              .ln1 = "attention.output.LayerNorm", .inter = "intermediate.dense",
              .out = "output.dense", .ln2 = "output.LayerNorm"},
    .head = {.dense = "pooler.dense", .out = "classifier"}, /* BertForSequenceClassification */
    .read_config = bert_read_config,
};
