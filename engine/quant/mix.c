/* mix.c: per-layer mixed precision rules (mix.h): lookup, the text form
 * and its parser, and the compact rules for a full (layer, kind) map. */
#include "engine/quant/mix.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[MT_GEMM_KINDS] = {"qkv", "attn_out", "ffn_in", "ffn_out"};

const char *mt_gemm_kind_name(mt_gemm_kind k)
{
    return (unsigned)k < MT_GEMM_KINDS ? kind_names[k] : "?";
}

static bool has_layer(const mt_mix_rule *r, int l)
{
    return l >= 0 && l < MT_MIX_MAX_LAYERS && (r->layers[l >> 6] >> (l & 63) & 1);
}

static void set_layer(mt_mix_rule *r, int l)
{
    r->layers[l >> 6] |= (uint64_t)1 << (l & 63);
}

mt_precision mt_mix_precision(const mt_mix *mix, int layer, mt_gemm_kind k, mt_precision dflt)
{
    if (!mix)
        return dflt;
    for (int i = mix->n - 1; i >= 0; i--) {
        const mt_mix_rule *r = &mix->rule[i];
        if ((r->kind < 0 || r->kind == (int)k) && has_layer(r, layer))
            return r->precision;
    }
    return dflt;
}

/* ---- the text form ---------------------------------------------------- */

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = 0;
    return s;
}

/* "0,5,7-9" -> bits; false with a reason on a bad list. */
static bool parse_layers(char *s, mt_mix_rule *r, const char **why)
{
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
        tok = trim(tok);
        char *end;
        long a = strtol(tok, &end, 10), b = a;
        if (end == tok || a < 0) {
            *why = "a layer must be a number >= 0 or a range a-b";
            return false;
        }
        if (*end == '-') {
            char *e2;
            b = strtol(end + 1, &e2, 10);
            if (e2 == end + 1 || *e2 || b < a) {
                *why = "a layer range must be a-b with a <= b";
                return false;
            }
        } else if (*end) {
            *why = "a layer must be a number >= 0 or a range a-b";
            return false;
        }
        if (b >= MT_MIX_MAX_LAYERS) {
            *why = "a layer number is over 127";
            return false;
        }
        for (long l = a; l <= b; l++)
            set_layer(r, (int)l);
    }
    if (!r->layers[0] && !r->layers[1]) {
        *why = "no layer after '@'";
        return false;
    }
    return true;
}

/* One rule "kind[@layers]=precision" (rule is modified). */
static bool parse_rule(char *rule, mt_mix_rule *r, const char **why)
{
    memset(r, 0, sizeof *r);
    char *eq = strchr(rule, '=');
    if (!eq) {
        *why = "expected kind[@layers]=precision";
        return false;
    }
    *eq = 0;
    char *prec = trim(eq + 1), *at = strchr(rule, '@');
    if (at)
        *at = 0;
    char *kind = trim(rule);
    r->kind = -2;
    if (!strcmp(kind, "*"))
        r->kind = -1;
    for (int k = 0; k < MT_GEMM_KINDS; k++)
        if (!strcmp(kind, kind_names[k]))
            r->kind = k;
    if (r->kind == -2) {
        *why = "the GEMM kind must be qkv, attn_out, ffn_in, ffn_out or *";
        return false;
    }
    if (mt_precision_parse(prec, &r->precision) != 0) {
        *why = "unknown precision (fp32, tf32, fp16, bf16, int8, fp8)";
        return false;
    }
    if (!at) {
        r->layers[0] = r->layers[1] = ~(uint64_t)0;
        return true;
    }
    return parse_layers(at + 1, r, why);
}

mt_status mt_mix_parse(const char *text, mt_mix *out, mt_err *err)
{
    memset(out, 0, sizeof *out);
    char *copy = strdup(text ? text : "");
    if (!copy)
        return mt_fail(err, MT_ENOMEM, "out of memory");
    mt_status st = MT_OK;
    char *save = NULL;
    for (char *rule = strtok_r(copy, ";", &save); rule; rule = strtok_r(NULL, ";", &save)) {
        char shown[96];
        snprintf(shown, sizeof shown, "%s", trim(rule));
        if (!*shown)
            continue;
        if (out->n == MT_MIX_MAX_RULES) {
            st = mt_fail(err, MT_EINVAL, "mix: more than %d rules", MT_MIX_MAX_RULES);
            break;
        }
        const char *why = NULL;
        if (!parse_rule(rule, &out->rule[out->n], &why)) {
            st = mt_fail(err, MT_EINVAL, "mix rule '%s': %s", shown, why);
            break;
        }
        out->n++;
    }
    free(copy);
    return st;
}

/* Appends the layer list of r ("0,5,7-9"); false when it does not fit. */
static bool put_layers(const mt_mix_rule *r, char *buf, size_t cap, size_t *len)
{
    bool first = true;
    for (int l = 0; l < MT_MIX_MAX_LAYERS; l++) {
        if (!has_layer(r, l))
            continue;
        int e = l;
        while (e + 1 < MT_MIX_MAX_LAYERS && has_layer(r, e + 1))
            e++;
        int w = e > l ? snprintf(buf + *len, cap - *len, "%s%d-%d", first ? "" : ",", l, e)
                      : snprintf(buf + *len, cap - *len, "%s%d", first ? "" : ",", l);
        if (w < 0 || (size_t)w >= cap - *len)
            return false;
        *len += (size_t)w;
        first = false;
        l = e;
    }
    return true;
}

bool mt_mix_format(const mt_mix *mix, char *buf, size_t cap)
{
    size_t len = 0;
    if (!cap)
        return false;
    buf[0] = 0;
    for (int i = 0; mix && i < mix->n; i++) {
        const mt_mix_rule *r = &mix->rule[i];
        const char *kind = r->kind < 0 ? "*" : kind_names[r->kind];
        int w = snprintf(buf + len, cap - len, "%s%s", i ? "; " : "", kind);
        if (w < 0 || (size_t)w >= cap - len)
            return false;
        len += (size_t)w;
        if (~r->layers[0] || ~r->layers[1]) {
            if (len + 1 >= cap)
                return false;
            buf[len++] = '@';
            if (!put_layers(r, buf, cap, &len))
                return false;
        }
        w = snprintf(buf + len, cap - len, "=%s", mt_precision_name(r->precision));
        if (w < 0 || (size_t)w >= cap - len)
            return false;
        len += (size_t)w;
    }
    return true;
}

mt_status mt_mix_from_map(const mt_precision *map, int nlayers, mt_mix *out, mt_err *err)
{
    memset(out, 0, sizeof *out);
    if (nlayers < 1 || nlayers > MT_MIX_MAX_LAYERS)
        return mt_fail(err, MT_EINVAL, "mix: %d layers (1..%d)", nlayers, MT_MIX_MAX_LAYERS);
    int count[MT_PREC_COUNT] = {0};
    for (int i = 0; i < nlayers * MT_GEMM_KINDS; i++)
        count[map[i]]++;
    mt_precision common = MT_PREC_FP32;
    for (int p = 0; p < MT_PREC_COUNT; p++)
        if (count[p] > count[common])
            common = (mt_precision)p;
    out->rule[out->n++] = (mt_mix_rule){.kind = -1, .layers = {~(uint64_t)0, ~(uint64_t)0},
                                        .precision = common};
    for (int k = 0; k < MT_GEMM_KINDS; k++)
        for (int p = 0; p < MT_PREC_COUNT; p++) {
            if (p == (int)common)
                continue;
            mt_mix_rule r = {.kind = k, .precision = (mt_precision)p};
            for (int l = 0; l < nlayers; l++)
                if (map[l * MT_GEMM_KINDS + k] == (mt_precision)p)
                    set_layer(&r, l);
            if (!r.layers[0] && !r.layers[1])
                continue;
            if (out->n == MT_MIX_MAX_RULES)
                return mt_fail(err, MT_EINVAL, "mix: more than %d rules", MT_MIX_MAX_RULES);
            out->rule[out->n++] = r;
        }
    return MT_OK;
}
