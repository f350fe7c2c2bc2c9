/* test_config.c: mantissa.json validation: the shipped config loads, and
 * each kind of mistake is refused with a message naming the field. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/registry.h"
#include "server/base/log.h"
#include "server/core/config.h"

#define MODEL_OK "{\"name\":\"m\",\"path\":\"p\",\"variants\":[{\"name\":\"a\",\"precision\":\"fp32\"}]}"

/* Parses text, expects failure, and checks the message contains want. */
static void expect_error(const char *text, const char *want)
{
    cfg_config *c = NULL;
    mt_err err = {{0}};
    mt_status st = cfg_parse(text, strlen(text), "t.json", &c, &err);
    ck_assert_msg(st != MT_OK, "accepted: %s", text);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(err.msg, want) != NULL, "message \"%s\" lacks \"%s\"", err.msg, want);
    ck_assert_msg(strncmp(err.msg, "t.json", 6) == 0, "message \"%s\" does not name the file", err.msg);
}

START_TEST(config_shipped_default_loads)
{
    cfg_config *c;
    mt_err err;
    ck_assert_msg(cfg_load("config/mantissa.json", &c, &err) == MT_OK, "%s", err.msg);
    ck_assert_int_eq(c->listen_port, 8080);
    ck_assert_int_ge(c->nmodels, 1);
    ck_assert_str_eq(c->models[0].name, "minilm");
    ck_assert_int_ge(c->models[0].nvariants, 1);
    cfg_free(c);
}
END_TEST

START_TEST(config_defaults_fill_optional_fields)
{
    const char *t = "{\"models\":[" MODEL_OK "]}";
    cfg_config *c;
    mt_err err;
    ck_assert_int_eq(cfg_parse(t, strlen(t), "t.json", &c, &err), MT_OK);
    ck_assert_int_eq(c->listen_port, 8080);
    ck_assert_uint_eq(c->max_body_bytes, 4u << 20);
    ck_assert(c->models[0].truncate);
    ck_assert_int_eq(c->models[0].variants[0].precision, MT_PREC_FP32);
    ck_assert_str_eq(c->models[0].variants[0].calibration, "absmax");
    /* every default the field tables hold */
    ck_assert_str_eq(c->listen_host, "0.0.0.0");
    ck_assert_int_eq(c->http_threads, 4);
    ck_assert_int_eq(c->max_inputs, 2048);
    ck_assert_int_eq(c->engine_threads, 0);
    ck_assert_int_eq(c->request_timeout_ms, 60000);
    ck_assert_int_eq(c->engine_workers, 1);
    ck_assert_int_eq(c->max_json_depth, 64);
    ck_assert_int_eq(c->max_input_bytes, 65536);
    ck_assert_int_eq(c->shutdown_grace_ms, 30000);
    ck_assert_int_eq(c->drain_delay_ms, 0);
    ck_assert_int_eq(c->connection_limit, 1000);
    ck_assert_int_eq(c->connection_timeout_s, 30);
    ck_assert_int_eq(c->log_level, LOG_INFO);
    ck_assert_int_eq(c->log_format, LOG_JSON);
    ck_assert(!c->log_format_overridden);
    ck_assert_str_eq(c->api_keys_file, "");
    ck_assert(c->watch);
    ck_assert_int_eq(c->reload_debounce_ms, 200);
    const cfg_model *m = &c->models[0];
    ck_assert_int_eq(m->device, CFG_DEVICE_AUTO);
    ck_assert_int_eq(m->max_seq_len, 0);
    ck_assert_int_eq(m->max_batch_size, 32);
    ck_assert_int_eq(m->max_batch_tokens, 16384);
    ck_assert_int_eq(m->max_queue_delay_us, 0);
    ck_assert(!m->delay_auto);
    ck_assert_int_eq(m->latency_target_ms, 100);
    ck_assert_int_eq(m->max_queue, 1024);
    ck_assert_int_eq(m->reference, -1);
    ck_assert_double_eq(m->shadow_rate, 0);
    ck_assert_int_eq(m->shadow_queue, 256);
    ck_assert_int_eq(m->drift_window, 200);
    ck_assert_double_eq(m->variants[0].percentile, 99.99);
    ck_assert_double_eq(m->variants[0].traffic, 100);
    ck_assert_double_eq(m->variants[0].drift_floor, 0);
    ck_assert(!m->variants[0].measure);
    cfg_free(c);
    /* named choices land as their enum values */
    t = "{\"server\":{\"log_level\":\"warn\",\"log_format\":\"text\"},"
        "\"models\":[{\"name\":\"m\",\"path\":\"p\","
        "\"device\":\"cuda\",\"batching\":{\"max_queue_delay_us\":\"auto\"},"
        "\"variants\":[{\"name\":\"a\",\"precision\":\"int8\",\"calibration\":\"mse\"}]}]}";
    ck_assert_msg(cfg_parse(t, strlen(t), "t.json", &c, &err) == MT_OK, "%s", err.msg);
    ck_assert_int_eq(c->log_level, LOG_WARN);
    ck_assert_int_eq(c->log_format, LOG_TEXT);
    ck_assert_int_eq(cfg_override_log_format(c, "xml"), -1);
    ck_assert_int_eq(c->log_format, LOG_TEXT);
    ck_assert_int_eq(cfg_override_log_format(c, "json"), 0);
    ck_assert(c->log_format == LOG_JSON && c->log_format_overridden);
    ck_assert_str_eq(mt_device_choices[c->models[0].device], "cuda");
    ck_assert_str_eq(mt_device_choice_reg(c->models[0].device)->name, "cuda");
    ck_assert(c->models[0].delay_auto);
    ck_assert_str_eq(c->models[0].variants[0].calibration, "mse");
    ck_assert_int_eq(cfg_variant_mix_high(&c->models[0].variants[0]), MT_PREC_COUNT);
    cfg_free(c);
    t = "{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"variants\":[{\"name\":\"a\","
        "\"precision\":\"int8g\"},{\"name\":\"b\",\"precision\":\"int8\",\"mix\":\"auto\","
        "\"mix_high\":\"int8g\"}]}]}";
    ck_assert_msg(cfg_parse(t, strlen(t), "t.json", &c, &err) == MT_OK, "%s", err.msg);
    ck_assert_int_eq(c->models[0].variants[0].precision, MT_PREC_INT8G);
    ck_assert_int_eq(cfg_variant_mix_high(&c->models[0].variants[1]), MT_PREC_INT8G);
    cfg_free(c);
}
END_TEST

START_TEST(config_rejects_unknown_precision_naming_the_field)
{
    expect_error("{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"variants\":["
                 "{\"name\":\"a\",\"precision\":\"fp32\"},{\"name\":\"b\",\"precision\":\"int4\"}]}]}",
                 "models[0].variants[1].precision: unknown precision \"int4\"");
    expect_error("{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"variants\":["
                 "{\"name\":\"a\",\"precision\":\"int8\",\"mix\":\"ffn_out@0=fp16; qkv@x=fp32\"}]}]}",
                 "models[0].variants[0].mix: mix rule 'qkv@x=fp32': a layer must be");
}
END_TEST

START_TEST(config_rejects_each_kind_of_mistake)
{
    expect_error("", "invalid JSON");
    expect_error("{\"models\":[" MODEL_OK "],}", "invalid JSON: trailing comma");
    expect_error("[]", "must be an object");
    expect_error("{}", "models: required field is missing");
    expect_error("{\"models\":[]}", "models: must be a non-empty array");
    expect_error("{\"modles\":[]}", "unknown field \"modles\"");
    expect_error("{\"models\":[" MODEL_OK "],\"models\":[" MODEL_OK "]}", "duplicate key \"models\"");
    expect_error("{\"server\":{\"listen\":\"nohost\"},\"models\":[" MODEL_OK "]}", "server.listen");
    expect_error("{\"server\":{\"listen\":\"localhost:8080\"},\"models\":[" MODEL_OK "]}",
                 "server.listen: must be \"address:port\": an IPv4 or IPv6 address (not a host name)");
    expect_error("{\"server\":{\"http_threads\":0},\"models\":[" MODEL_OK "]}",
                 "server.http_threads: 0 is out of range");
    expect_error("{\"server\":{\"http_threads\":2.5},\"models\":[" MODEL_OK "]}",
                 "server.http_threads: must be an integer");
    expect_error("{\"server\":{\"max_body_bytes\":\"big\"},\"models\":[" MODEL_OK "]}",
                 "server.max_body_bytes: must be an integer");
    expect_error("{\"models\":[{\"path\":\"p\",\"variants\":[{\"name\":\"a\",\"precision\":\"fp32\"}]}]}",
                 "models[0].name: required field is missing");
    expect_error("{\"models\":[{\"name\":\"a/b\",\"path\":\"p\",\"variants\":[{\"name\":\"a\",\"precision\":\"fp32\"}]}]}",
                 "models[0].name: \"a/b\" is not a valid name");
    expect_error("{\"server\":{\"log_level\":\"loud\"},\"models\":[" MODEL_OK "]}",
                 "server.log_level: unknown level \"loud\" (expected debug, info, warn, error or off)");
    expect_error("{\"server\":{\"log_format\":\"logfmt\"},\"models\":[" MODEL_OK "]}",
                 "server.log_format: unknown log format \"logfmt\" (expected text or json)");
    expect_error("{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"device\":\"tpu\",\"variants\":[{\"name\":\"a\",\"precision\":\"fp32\"}]}]}",
                 "models[0].device: unknown device \"tpu\"");
    expect_error("{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"variants\":[]}]}",
                 "models[0].variants: must be a non-empty array");
    expect_error("{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"variants\":[{\"name\":\"a\",\"precision\":\"fp32\"},{\"name\":\"a\",\"precision\":\"fp32\"}]}]}",
                 "duplicate variant name \"a\"");
    expect_error("{\"models\":[" MODEL_OK "," MODEL_OK "]}", "models[1]: duplicate model name \"m\"");
    expect_error("{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"variants\":[{\"name\":\"a\",\"precision\":\"int8\",\"calibration\":\"magic\"}]}]}",
                 "models[0].variants[0].calibration: unknown calibration \"magic\"");
    expect_error("{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"variants\":[{\"name\":\"a\",\"precision\":\"int8\",\"mix\":\"auto\",\"mix_high\":\"int8\"}]}]}",
                 "models[0].variants[0].mix_high: unknown mix_high \"int8\"");
    expect_error("{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"variants\":[{\"name\":\"a\",\"precision\":\"int8\",\"calibration\":\"percentile\",\"percentile\":20}]}]}",
                 "models[0].variants[0].percentile: 20 is out of range");
    expect_error("{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"variants\":[{\"name\":\"a\",\"precision\":\"int8\",\"percentile\":99.9}]}]}",
                 "\"percentile\" is set but calibration is \"absmax\"");
    expect_error("{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"variants\":[{\"name\":\"a\",\"precision\":\"fp32\",\"traffic\":0}]}]}",
                 "traffic weights add up to 0");
    expect_error("{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"variants\":[{\"name\":\"a\",\"precision\":\"int8\",\"measure\":\"yes\"}]}]}",
                 "models[0].variants[0].measure: must be true or false");
    expect_error("{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"measure\":true,\"variants\":[{\"name\":\"a\",\"precision\":\"int8\"}]}]}",
                 "models[0]: unknown field \"measure\"");
    expect_error("{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"batching\":{\"max_batch_size\":-1},\"variants\":[{\"name\":\"a\",\"precision\":\"fp32\"}]}]}",
                 "models[0].batching.max_batch_size: -1 is out of range");
}
END_TEST

/* server.cors_allow_origins: off by default; origins kept space-separated;
 * anything but origins (scheme://host[:port]) or "*" refused, naming it. */
START_TEST(config_cors_allow_origins)
{
    cfg_config *c = NULL;
    mt_err err = {{0}};
    const char *off = "{\"models\":[" MODEL_OK "]}";
    ck_assert_int_eq(cfg_parse(off, strlen(off), "t.json", &c, &err), MT_OK);
    ck_assert_str_eq(c->cors_allow_origins, "");
    cfg_free(c);
    const char *on = "{\"server\":{\"cors_allow_origins\":[\"https://app.example.com\","
                     "\"http://localhost:3000\",\"*\"]},\"models\":[" MODEL_OK "]}";
    ck_assert_msg(cfg_parse(on, strlen(on), "t.json", &c, &err) == MT_OK, "%s", err.msg);
    ck_assert_str_eq(c->cors_allow_origins, "https://app.example.com http://localhost:3000 *");
    cfg_free(c);
    expect_error("{\"server\":{\"cors_allow_origins\":\"*\"},\"models\":[" MODEL_OK "]}",
                 "server.cors_allow_origins: must be an array");
    expect_error("{\"server\":{\"cors_allow_origins\":[\"*\",\"https://a.example/\"]},"
                 "\"models\":[" MODEL_OK "]}",
                 "server.cors_allow_origins: [1] must be \"*\" or an origin");
    expect_error("{\"server\":{\"cors_allow_origins\":[\"example.com\"]},\"models\":[" MODEL_OK
                 "]}",
                 "[0] must be");
    expect_error("{\"server\":{\"cors_allow_origins\":[3]},\"models\":[" MODEL_OK "]}",
                 "[0] must be");
}
END_TEST

/* server.tracing: off without an endpoint, with the documented defaults;
 * an endpoint without a path gets OTLP's /v1/traces; headers kept as
 * lines; each mistake refused naming its field. */
static cfg_config *parse_tracing(const char *tracing)
{
    char text[1024];
    snprintf(text, sizeof text, "{\"server\":{\"tracing\":%s},\"models\":[" MODEL_OK "]}",
             tracing);
    cfg_config *c = NULL;
    mt_err err = {{0}};
    ck_assert_msg(cfg_parse(text, strlen(text), "t.json", &c, &err) == MT_OK, "%s", err.msg);
    return c;
}

static void tracing_error(const char *tracing, const char *want)
{
    char text[1024];
    snprintf(text, sizeof text, "{\"server\":{\"tracing\":%s},\"models\":[" MODEL_OK "]}",
             tracing);
    expect_error(text, want);
}

START_TEST(config_tracing)
{
    cfg_config *c = NULL;
    mt_err err = {{0}};
    const char *off = "{\"models\":[" MODEL_OK "]}";
    ck_assert_int_eq(cfg_parse(off, strlen(off), "t.json", &c, &err), MT_OK);
    ck_assert_str_eq(c->tracing.endpoint, "");
    ck_assert_double_eq(c->tracing.sample_ratio, 1.0);
    ck_assert_str_eq(c->tracing.service_name, "mantissa");
    ck_assert_str_eq(c->tracing.headers, "");
    ck_assert_int_eq(c->tracing.max_queue_spans, 2048);
    ck_assert_int_eq(c->tracing.max_batch_spans, 512);
    ck_assert_int_eq(c->tracing.batch_delay_ms, 1000);
    ck_assert_int_eq(c->tracing.export_timeout_ms, 5000);
    cfg_free(c);
    c = parse_tracing("{\"endpoint\":\"http://collector:4318/v1/traces\",\"sample_ratio\":0.1,"
                      "\"service_name\":\"embed-eu\",\"headers\":{\"Authorization\":\"Bearer "
                      "x y\",\"X-Scope-OrgID\":\"t1\"}}");
    ck_assert_str_eq(c->tracing.endpoint, "http://collector:4318/v1/traces");
    ck_assert_double_eq(c->tracing.sample_ratio, 0.1);
    ck_assert_str_eq(c->tracing.service_name, "embed-eu");
    ck_assert_str_eq(c->tracing.headers, "Authorization: Bearer x y\nX-Scope-OrgID: t1\n");
    cfg_free(c);
    static const char *const base[][2] = {
        {"http://collector:4318", "http://collector:4318/v1/traces"},
        {"https://[::1]:4318/", "https://[::1]:4318/v1/traces"},
        {"http://10.0.0.1/otlp/v1/traces", "http://10.0.0.1/otlp/v1/traces"},
    };
    for (size_t i = 0; i < sizeof base / sizeof *base; i++) {
        char t[256];
        snprintf(t, sizeof t, "{\"endpoint\":\"%s\"}", base[i][0]);
        c = parse_tracing(t);
        ck_assert_str_eq(c->tracing.endpoint, base[i][1]);
        cfg_free(c);
    }
    tracing_error("\"on\"", "server.tracing: must be an object");
    tracing_error("{\"endpont\":\"x\"}", "server.tracing: unknown field \"endpont\"");
    tracing_error("{\"endpoint\":\"grpc://c:4317\"}",
                  "server.tracing.endpoint: \"grpc://c:4317\" must be an http:// or https:// URL");
    tracing_error("{\"endpoint\":\"http://:4318\"}", "server.tracing.endpoint: \"http://:4318\" "
                                                      "needs a host");
    tracing_error("{\"endpoint\":\"http://c:99999/v1/traces\"}", "server.tracing.endpoint");
    tracing_error("{\"endpoint\":\"http://c:43x8\"}", "server.tracing.endpoint");
    tracing_error("{\"endpoint\":\"http://c /v1\"}", "has a space");
    tracing_error("{\"sample_ratio\":1.5}", "server.tracing.sample_ratio: 1.5 is out of range");
    tracing_error("{\"service_name\":\"\"}", "server.tracing.service_name: must not be empty");
    tracing_error("{\"max_queue_spans\":2}", "server.tracing.max_queue_spans: 2 is out of range");
    tracing_error("{\"headers\":[\"a\"]}", "server.tracing.headers: must be an object");
    tracing_error("{\"headers\":{\"Bad Name\":\"v\"}}", "\"Bad Name\" is not a header name");
    tracing_error("{\"headers\":{\"content-type\":\"v\"}}", "Content-Type is set by the exporter");
    tracing_error("{\"headers\":{\"X-A\":\"v\\nX-B: w\"}}", "X-A: the value must be a string");
    tracing_error("{\"headers\":{\"X-A\":3}}", "X-A: the value must be a string");
}
END_TEST

START_TEST(config_json_errors_give_line_column_and_reason)
{
    expect_error("{\n  \"models\": [],\n}", "t.json: line 2, column 15: invalid JSON: trailing comma");
    expect_error("{\n  \"models\" []\n}",
                 "t.json: line 2, column 12: invalid JSON: expected ':' after a key");
    expect_error("{\"models\": \"abc", "t.json: line 1, column 12: invalid JSON: unterminated string");
    /* columns count characters, not bytes */
    expect_error("{\"\xc3\xbc\": 1,}", "t.json: line 1, column 8: invalid JSON: trailing comma");
    /* strict JSON: what cJSON would let through is refused too */
    expect_error("{\"models\":[" MODEL_OK "]} x", "invalid JSON: bytes after the JSON value");
    expect_error("{\"server\":{\"max_inputs\":010},\"models\":[" MODEL_OK "]}",
                 "line 1, column 26: invalid JSON: number with a leading zero");
}
END_TEST

START_TEST(config_missing_file_names_the_path)
{
    cfg_config *c;
    mt_err err;
    ck_assert_int_eq(cfg_load("no/such/mantissa.json", &c, &err), MT_EIO);
    ck_assert_ptr_nonnull(strstr(err.msg, "no/such/mantissa.json"));
}
END_TEST

START_TEST(config_listen_parses_v4_v6_and_port_only)
{
    char host[64];
    int port;
    ck_assert_int_eq(cfg_parse_listen("127.0.0.1:9000", host, sizeof host, &port), 0);
    ck_assert_str_eq(host, "127.0.0.1");
    ck_assert_int_eq(port, 9000);
    ck_assert_int_eq(cfg_parse_listen("[::1]:0", host, sizeof host, &port), 0);
    ck_assert_str_eq(host, "::1");
    ck_assert_int_eq(port, 0);
    ck_assert_int_eq(cfg_parse_listen(":8081", host, sizeof host, &port), 0);
    ck_assert_str_eq(host, "0.0.0.0");
    ck_assert_int_eq(cfg_parse_listen("h:99999", host, sizeof host, &port), -1);
    ck_assert_int_eq(cfg_parse_listen("h:", host, sizeof host, &port), -1);
    /* addresses, not names: the listener binds the address as it is */
    static const char *const bad[] = {"localhost:80", "localhost", "[localhost]:80", "1.2.3:80",
                                      "300.1.1.1:80", "[::1]", "::1:80", "[127.0.0.1]:80"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(cfg_parse_listen(bad[i], host, sizeof host, &port) == -1, "%s", bad[i]);
    ck_assert_int_eq(cfg_parse_listen("[fe80::1]:65535", host, sizeof host, &port), 0);
}
END_TEST

START_TEST(config_grpc_listen_is_off_by_default_and_checked)
{
    cfg_config *c;
    mt_err err;
    const char *t = "{\"models\":[" MODEL_OK "]}";
    ck_assert_msg(cfg_parse(t, strlen(t), "t.json", &c, &err) == MT_OK, "%s", err.msg);
    ck_assert_int_eq(c->grpc_port, -1);
    ck_assert_int_eq(c->grpc_max_streams, 100);
    ck_assert_int_eq(cfg_override_grpc_listen(c, "127.0.0.1:8001"), 0);
    ck_assert_str_eq(c->grpc_host, "127.0.0.1");
    ck_assert_int_eq(c->grpc_port, 8001);
    ck_assert_int_eq(cfg_override_grpc_listen(c, "off"), 0);
    ck_assert_int_eq(c->grpc_port, -1);
    ck_assert_int_eq(cfg_override_grpc_listen(c, "localhost:1"), -1);
    cfg_free(c);
    t = "{\"server\":{\"grpc_listen\":\"[::1]:0\",\"grpc_max_streams\":7},\"models\":["
        MODEL_OK "]}";
    ck_assert_msg(cfg_parse(t, strlen(t), "t.json", &c, &err) == MT_OK, "%s", err.msg);
    ck_assert_str_eq(c->grpc_host, "::1");
    ck_assert_int_eq(c->grpc_port, 0);
    ck_assert_int_eq(c->grpc_max_streams, 7);
    cfg_free(c);
    expect_error("{\"server\":{\"grpc_listen\":\"localhost:8001\"},\"models\":[" MODEL_OK "]}",
                 "server.grpc_listen");
    expect_error("{\"server\":{\"grpc_listen\":8001},\"models\":[" MODEL_OK "]}",
                 "server.grpc_listen");
    expect_error("{\"server\":{\"grpc_max_streams\":0},\"models\":[" MODEL_OK "]}",
                 "server.grpc_max_streams");
}
END_TEST

START_TEST(config_example_configs_load)
{
    static const char *const files[] = {"config/ab-split.json", "config/shadow.json",
                                         "config/cpu-only.json"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        cfg_config *c;
        mt_err err;
        ck_assert_msg(cfg_load(files[i], &c, &err) == MT_OK, "%s", err.msg);
        cfg_free(c);
    }
}
END_TEST

#define VAR(n, p) "{\"name\":\"" n "\",\"precision\":\"" p "\"}"

START_TEST(config_reference_names_a_variant_or_makes_one)
{
    const char *t = "{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"variants\":[" VAR("a", "int8")
                    "," VAR("b", "fp32") "],\"reference\":{\"variant\":\"b\",\"shadow_rate\":0.5}}]}";
    cfg_config *c;
    mt_err err;
    ck_assert_msg(cfg_parse(t, strlen(t), "t.json", &c, &err) == MT_OK, "%s", err.msg);
    ck_assert_int_eq(c->models[0].reference, 1);
    ck_assert(c->models[0].shadow_rate == 0.5);
    cfg_free(c);
    t = "{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"variants\":[" VAR("a", "int8")
        "],\"reference\":{\"precision\":\"fp32\"}}]}";
    ck_assert_msg(cfg_parse(t, strlen(t), "t.json", &c, &err) == MT_OK, "%s", err.msg);
    ck_assert_int_eq(c->models[0].nvariants, 2);
    ck_assert_int_eq(c->models[0].reference, 1);
    ck_assert_str_eq(c->models[0].variants[1].name, "reference");
    ck_assert(c->models[0].variants[1].traffic == 0 && c->models[0].variants[1].is_reference);
    cfg_free(c);
}
END_TEST

START_TEST(config_rejects_hot_switch_mistakes_naming_the_field)
{
    expect_error("{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"variants\":[" VAR("a", "fp32")
                 "],\"reference\":{\"variant\":\"zz\"}}]}",
                 "models[0].reference.variant: no variant named \"zz\"");
    expect_error("{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"variants\":[" VAR("a", "fp32")
                 "],\"reference\":{\"variant\":\"a\",\"precision\":\"fp32\"}}]}",
                 "models[0].reference: set either");
    expect_error("{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"variants\":[" VAR("a", "fp32")
                 "],\"reference\":{\"precision\":\"int4\"}}]}",
                 "models[0].reference.precision: unknown precision");
    expect_error("{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"variants\":["
                 "{\"name\":\"a\",\"precision\":\"int8\",\"drift_floor\":0.9}]}]}",
                 "models[0].variants[0].drift_floor: needs models[].reference");
    expect_error("{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"variants\":["
                 "{\"name\":\"a\",\"precision\":\"int8\",\"gate\":{\"min_cosine\":0.9}}]}]}",
                 "models[0].variants[0].gate.probes: required field is missing");
    expect_error("{\"models\":[{\"name\":\"m\",\"path\":\"p\",\"variants\":[" VAR("a", "fp32")
                 "],\"reference\":{\"variant\":\"a\",\"shadow_rate\":2}}]}",
                 "models[0].reference.shadow_rate: 2 is out of range");
    expect_error("{\"server\":{\"reload_debounce_ms\":-1},\"models\":[" MODEL_OK "]}",
                 "server.reload_debounce_ms");
}
END_TEST

START_TEST(config_same_build_ignores_live_settings)
{
    cfg_variant a = {.name = "a", .precision = MT_PREC_INT8, .calibration = "absmax",
                     .traffic = 10};
    cfg_variant b = a;
    b.traffic = 90;
    b.drift_floor = 0.5;
    ck_assert(cfg_variant_same_build(&a, &b));
    b.precision = MT_PREC_FP8;
    ck_assert(!cfg_variant_same_build(&a, &b));
    b = a;
    strcpy(b.weights, "q.safetensors");
    ck_assert(!cfg_variant_same_build(&a, &b));
    b = a; /* measure's figures are taken when a build is made */
    b.measure = true;
    ck_assert(!cfg_variant_same_build(&a, &b));
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, config_shipped_default_loads);
    tcase_add_test(tc, config_defaults_fill_optional_fields);
    tcase_add_test(tc, config_rejects_unknown_precision_naming_the_field);
    tcase_add_test(tc, config_rejects_each_kind_of_mistake);
    tcase_add_test(tc, config_json_errors_give_line_column_and_reason);
    tcase_add_test(tc, config_cors_allow_origins);
    tcase_add_test(tc, config_tracing);
    tcase_add_test(tc, config_missing_file_names_the_path);
    tcase_add_test(tc, config_listen_parses_v4_v6_and_port_only);
    tcase_add_test(tc, config_grpc_listen_is_off_by_default_and_checked);
    tcase_add_test(tc, config_example_configs_load);
    tcase_add_test(tc, config_reference_names_a_variant_or_makes_one);
    tcase_add_test(tc, config_rejects_hot_switch_mistakes_naming_the_field);
    tcase_add_test(tc, config_same_build_ignores_live_settings);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
