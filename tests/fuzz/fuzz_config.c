/* fuzz_config.c: libFuzzer harness for the config parser (server/core/config.c,
 * cfg_parse) on arbitrary bytes as the text of mantissa.json. The input is
 * passed as libFuzzer gives it, an exact-size buffer with no NUL after it,
 * as cfg_parse's (text, len) signature allows.
 *
 * Beyond "no crash, no sanitizer report", it checks what config.h
 * promises: a rejected config leaves no result and an error that names the
 * file (its label); an accepted one has at least one model, each with a
 * name, a path and at least one variant, names unique (cfg_find_model
 * finds each model itself), a port in range, and the variant fields the
 * server relies on (non-negative traffic, a known precision).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/core/config.h"
#include "tests/fuzz/fuzz_common.h"

#define LABEL "fuzz.json"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cfg_config *c = NULL;
    mt_err err = {{0}};
    mt_status s = cfg_parse((const char *)data, size, LABEL, &c, &err);
    if (s != MT_OK) {
        FUZZ_CHECK(c == NULL, "a failure left *out set");
        FUZZ_CHECK(s == MT_EINVAL || s == MT_ENOMEM, "unexpected status %s", mt_strerror(s));
        FUZZ_CHECK(!strncmp(err.msg, LABEL ":", sizeof LABEL), "error does not name the file: \"%s\"",
                   err.msg);
        return 0;
    }
    FUZZ_CHECK(c, "MT_OK without a config");
    FUZZ_CHECK(c->listen_port >= 0 && c->listen_port <= 65535, "port %d", c->listen_port);
    FUZZ_CHECK(c->max_body_bytes > 0 && c->max_inputs > 0, "body cap %zu, inputs cap %d",
               c->max_body_bytes, c->max_inputs);
    FUZZ_CHECK(c->nmodels >= 1 && c->models, "%d models", c->nmodels);
    for (int i = 0; i < c->nmodels; i++) {
        const cfg_model *m = &c->models[i];
        FUZZ_CHECK(m->name[0] && memchr(m->name, 0, sizeof m->name), "models[%d] has no name", i);
        FUZZ_CHECK(m->path && m->path[0], "models[%d] has no path", i);
        FUZZ_CHECK(cfg_find_model(c, m->name) == m, "models[%d]: name \"%s\" is not unique", i,
                   m->name);
        FUZZ_CHECK(m->nvariants >= 1 && m->variants, "models[%d] has %d variants", i,
                   m->nvariants);
        FUZZ_CHECK(m->max_seq_len >= 0, "models[%d].max_seq_len %d", i, m->max_seq_len);
        for (int k = 0; k < m->nvariants; k++) {
            const cfg_variant *v = &m->variants[k];
            FUZZ_CHECK(v->name[0] && memchr(v->name, 0, sizeof v->name),
                       "models[%d].variants[%d] has no name", i, k);
            FUZZ_CHECK(v->traffic >= 0 && v->traffic == v->traffic,
                       "models[%d].variants[%d].traffic %g", i, k, v->traffic);
            FUZZ_CHECK(mt_precision_name(v->precision) != NULL,
                       "models[%d].variants[%d]: precision %d has no name", i, k,
                       (int)v->precision);
        }
    }
    cfg_free(c);
    return 0;
}
