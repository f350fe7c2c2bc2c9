/* qwen3.c: the Qwen3 row (model_type "qwen3", as Qwen3-Embedding-0.6B, 4B
 * and 8B): Qwen3Config's keys, Qwen3Model's tensor names (also under
 * Qwen3ForCausalLM's "model." prefix), and its layer as data: pre-norm
 * RMSNorm layers and a final norm, grouped-query attention with an
 * explicit head_dim and a per-head RMSNorm of Q and K before rotary
 * positions (rope_theta), causal attention, a SwiGLU MLP, no biases, no
 * position table or embedding norm. Qwen3-Embedding pools the last token
 * (its 1_Pooling/config.json says so; the row's default too). Its
 * tokenizer is byte-level BPE (tokenizer.json), which models/enc_tokenizer.c
 * refuses by name until it is written.
 */
#include <string.h>

#include "models/arch.h"

/* Qwen3Config's fields the layer description does not cover: refused
 * where they ask for what the row does not compute. */
static mt_status qwen3_read_config(const cJSON *j, const char *path, enc_config *c, mt_err *err)
{
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(j, "use_sliding_window");
    if (rs && !cJSON_IsNull(rs))
        return mt_fail(err, MT_EUNSUPPORTED,
                       "%s: field 'rope_scaling' is not supported (null only)", path);
    if (sw && !cJSON_IsFalse(sw))
        return mt_fail(err, MT_EUNSUPPORTED,
                       "%s: field 'use_sliding_window' is not supported (false only)", path);
    return MT_OK;
}

const enc_arch enc_arch_qwen3 = {
    .model_type = "qwen3",
    .prefix = "model.",
    .keys = {.vocab = "vocab_size", .hidden = "hidden_size", .layers = "num_hidden_layers",
             .heads = "num_attention_heads", .intermediate = "intermediate_size",
             .max_positions = "max_position_embeddings", .act = "hidden_act",
             .eps = "rms_norm_eps", .kv_heads = "num_key_value_heads", .head_dim = "head_dim",
             .rope_theta = "rope_theta"},
    .emb = {.word = "embed_tokens.weight", .final = "norm"},
    .layers = "layers",
    .layer = {.q = "self_attn.q_proj", .k = "self_attn.k_proj", .v = "self_attn.v_proj",
              .o = "self_attn.o_proj", .ln1 = "input_layernorm", .gate = "mlp.gate_proj",
              .inter = "mlp.up_proj", .out = "mlp.down_proj", .ln2 = "post_attention_layernorm",
              .q_norm = "self_attn.q_norm", .k_norm = "self_attn.k_norm"},
    .kind = {.place = ENC_NORM_PRE, .norm = ENC_RMSNORM, .mlp = ENC_MLP_GATED_SILU,
             .pos = ENC_POS_ROTARY, .causal = true, .optional_bias = true},
    .pooling = MT_POOL_LAST,
    .read_config = qwen3_read_config,
};
