/* xlm_roberta.c: the XLM-RoBERTa row (model_type "xlm-roberta": bge-m3,
 * multilingual-e5, the bge-reranker family): BERT's layer and tensor names
 * (under XLMRobertaFor*'s "roberta." prefix), RoBERTa's position ids
 * (models/roberta_pos.c: from pad_token_id + 1), its one token type, norm
 * eps from layer_norm_eps, and the SentencePiece Unigram tokenizer of its
 * tokenizer.json (models/enc_tokenizer.c; <s> a </s></s> b </s> for a
 * pair). XLMRobertaForSequenceClassification's head (classifier.dense with
 * tanh, classifier.out_proj) makes a folder a reranker. */
#include <string.h>

#include "models/encoder_internal.h"

/* Absolute positions only; pad_token_id places them (roberta_pos.c). */
static mt_status xlmr_read_config(const cJSON *j, const char *path, enc_config *c, mt_err *err)
{
    const cJSON *pet = cJSON_GetObjectItemCaseSensitive(j, "position_embedding_type");
    if (pet && (!cJSON_IsString(pet) || strcmp(pet->valuestring, "absolute") != 0))
        return mt_fail(err, MT_EUNSUPPORTED, "%s: position_embedding_type must be \"absolute\"",
                       path);
    return enc_roberta_pad(j, path, c, err);
}

const enc_arch enc_arch_xlm_roberta = {
    .model_type = "xlm-roberta",
    .prefix = "roberta.",
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
    .head = {.dense = "classifier.dense", .out = "classifier.out_proj"},
    .cls_token = "<s>",
    .sep_token = "</s>",
    .pad_token = "<pad>",
    .unk_token = "<unk>",
    .pooling = MT_POOL_CLS,
    .read_config = xlmr_read_config,
    .embed = enc_roberta_embed,
    .recordable = enc_roberta_recordable,
};
