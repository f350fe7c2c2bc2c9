/* mix.h: per-layer mixed precision: which precision each encoder GEMM
 * weight takes when a variant does not give all of them the same one.
 *
 * An encoder layer has four GEMM weights (mt_gemm_kind). A mix is a list
 * of rules, each "kind[@layers]=precision"; for a weight the last rule
 * that matches its kind and layer wins, and a weight no rule matches takes
 * the variant's own precision. The text form, used by the config
 * (variants[].mix), by `mantissa quantize --mix` and in a quantized file's
 * metadata, is the rules joined by ';', for example
 *     "ffn_out@0,5=fp16"           int8 elsewhere (with precision int8),
 *     "*=int8; ffn_out@0-2=bf16"   every GEMM int8 but three FFN outputs.
 * kind is qkv, attn_out, ffn_in, ffn_out or * (all four); layers is a list
 * of layer numbers and ranges a-b (0-based), all layers when left out.
 */
#ifndef MT_ENGINE_MIX_H
#define MT_ENGINE_MIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/precision.h"
#include "engine/status.h"

typedef enum {
    MT_GEMM_QKV,      /* the packed query/key/value projection */
    MT_GEMM_ATTN_OUT, /* attention output projection */
    MT_GEMM_FFN_IN,   /* feed-forward up projection (intermediate) */
    MT_GEMM_FFN_OUT,  /* feed-forward down projection (output) */
    MT_GEMM_KINDS
} mt_gemm_kind;

#define MT_MIX_MAX_RULES 64
#define MT_MIX_MAX_LAYERS 128

typedef struct {
    int kind;              /* an mt_gemm_kind, or -1 for all four */
    uint64_t layers[2];    /* bit l: layer l matches */
    mt_precision precision;
} mt_mix_rule;

typedef struct {
    int n;
    mt_mix_rule rule[MT_MIX_MAX_RULES];
} mt_mix;

/* The name of a GEMM kind ("qkv", ...). */
const char *mt_gemm_kind_name(mt_gemm_kind k);

/* The precision of the weight of kind k in layer l: the last matching
 * rule's, else dflt. A NULL or empty mix gives dflt. */
mt_precision mt_mix_precision(const mt_mix *mix, int layer, mt_gemm_kind k, mt_precision dflt);

/* Parses the text form into *out (MT_EINVAL naming the rule and what is
 * wrong with it). An empty text is an empty mix. */
mt_status mt_mix_parse(const char *text, mt_mix *out, mt_err *err);

/* The text form of mix, rule by rule (it parses back to the same rules).
 * Returns false when cap is too small. */
bool mt_mix_format(const mt_mix *mix, char *buf, size_t cap);

/* A mix that gives every (layer, kind) of an nlayers-layer encoder the
 * precision in map[layer * MT_GEMM_KINDS + kind], written as few rules
 * as possible for a map mostly of one precision: "*=<most common>" then
 * one rule per other (kind, precision) listing its layers. */
mt_status mt_mix_from_map(const mt_precision *map, int nlayers, mt_mix *out, mt_err *err);

#endif
