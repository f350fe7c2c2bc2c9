/* test_pbjson.c: server/api/pbjson.c, the protobuf <-> KServe REST JSON
 * mapping the gRPC methods use, against protobuf-c's own reader and writer
 * on the messages of server/api/kserve.proto: what JSON encodes to is read
 * back by protobuf-c field by field, and what protobuf-c writes decodes to
 * the JSON the REST handlers take. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/kserve.pb-c.h"
#include "server/api/pbjson.h"

static cJSON *parse(const char *s)
{
    cJSON *j = cJSON_Parse(s);
    ck_assert_msg(j != NULL, "bad test JSON: %s", s);
    return j;
}

static const Inference__InferParameter *param(Inference__ModelInferResponse *r, const char *key)
{
    for (size_t i = 0; i < r->n_parameters; i++)
        if (!strcmp(r->parameters[i]->key, key))
            return r->parameters[i]->value;
    ck_abort_msg("no parameter %s", key);
    return NULL;
}

START_TEST(pbjson_encodes_an_infer_response_protobuf_c_reads)
{
    cJSON *j = parse("{\"model_name\":\"minilm\",\"model_version\":\"1\",\"id\":\"r-1\","
                     "\"parameters\":{\"variant\":\"int8\",\"prompt_tokens\":17,"
                     "\"truncated\":true,\"ratio\":0.25,\"big\":18446744073709551615},"
                     "\"outputs\":[{\"name\":\"embedding\",\"datatype\":\"FP32\","
                     "\"shape\":[2,384]}],\"unknown_key\":[1,2,3]}");
    sbuf b;
    sb_init(&b);
    ck_assert(pbjson_encode(&inference__model_infer_response__descriptor, j, &b));
    Inference__ModelInferResponse *r =
        inference__model_infer_response__unpack(NULL, b.len, (const uint8_t *)b.data);
    ck_assert_ptr_nonnull(r);
    ck_assert_str_eq(r->model_name, "minilm");
    ck_assert_str_eq(r->id, "r-1");
    ck_assert_uint_eq(r->n_outputs, 1);
    ck_assert_str_eq(r->outputs[0]->datatype, "FP32");
    ck_assert_uint_eq(r->outputs[0]->n_shape, 2);
    ck_assert_int_eq(r->outputs[0]->shape[0], 2);
    ck_assert_int_eq(r->outputs[0]->shape[1], 384);
    const Inference__InferParameter *p = param(r, "variant");
    ck_assert_int_eq(p->parameter_choice_case, INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM);
    ck_assert_str_eq(p->string_param, "int8");
    p = param(r, "prompt_tokens");
    ck_assert_int_eq(p->parameter_choice_case, INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM);
    ck_assert_int_eq(p->int64_param, 17);
    p = param(r, "truncated");
    ck_assert_int_eq(p->parameter_choice_case, INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM);
    ck_assert(p->bool_param);
    p = param(r, "ratio");
    ck_assert_int_eq(p->parameter_choice_case, INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM);
    ck_assert(p->double_param == 0.25);
    p = param(r, "big");
    ck_assert_int_eq(p->parameter_choice_case, INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM);
    ck_assert(p->uint64_param == UINT64_MAX);
    inference__model_infer_response__free_unpacked(r, NULL);
    sb_free(&b);
    cJSON_Delete(j);
}
END_TEST

START_TEST(pbjson_encodes_enums_by_name_and_negative_dims)
{
    cJSON *j = parse("{\"config\":{\"name\":\"m\",\"max_batch_size\":0,"
                     "\"input\":[{\"name\":\"text\",\"data_type\":\"TYPE_STRING\",\"dims\":[-1]}],"
                     "\"output\":[{\"name\":\"e\",\"data_type\":11,\"dims\":[-1,384]}],"
                     "\"instance_group\":[{\"kind\":\"KIND_CPU\",\"count\":2}],"
                     "\"parameters\":{\"k\":{\"string_value\":\"v\"}}}}");
    sbuf b;
    sb_init(&b);
    ck_assert(pbjson_encode(&inference__model_config_response__descriptor, j, &b));
    Inference__ModelConfigResponse *r =
        inference__model_config_response__unpack(NULL, b.len, (const uint8_t *)b.data);
    ck_assert_ptr_nonnull(r);
    const Inference__ModelConfig *c = r->config;
    ck_assert_int_eq(c->input[0]->data_type, INFERENCE__DATA_TYPE__TYPE_STRING);
    ck_assert_int_eq(c->input[0]->dims[0], -1);
    ck_assert_int_eq(c->output[0]->data_type, INFERENCE__DATA_TYPE__TYPE_FP32);
    ck_assert_int_eq(c->output[0]->dims[1], 384);
    ck_assert_int_eq(c->instance_group[0]->kind, INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU);
    ck_assert_int_eq(c->instance_group[0]->count, 2);
    ck_assert_uint_eq(c->n_parameters, 1);
    ck_assert_str_eq(c->parameters[0]->key, "k");
    ck_assert_str_eq(c->parameters[0]->value->string_value, "v");
    inference__model_config_response__free_unpacked(r, NULL);
    sb_free(&b);
    cJSON_Delete(j);
}
END_TEST

START_TEST(pbjson_decodes_parameters_as_plain_values)
{
    Inference__InferParameter pb = INFERENCE__INFER_PARAMETER__INIT, pi = INFERENCE__INFER_PARAMETER__INIT,
                              ps = INFERENCE__INFER_PARAMETER__INIT;
    pb.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
    pb.bool_param = 0;
    pi.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
    pi.int64_param = -5;
    ps.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
    ps.string_param = (char *)"left";
    Inference__ModelInferRequest__ParametersEntry e[3] = {
        INFERENCE__MODEL_INFER_REQUEST__PARAMETERS_ENTRY__INIT,
        INFERENCE__MODEL_INFER_REQUEST__PARAMETERS_ENTRY__INIT,
        INFERENCE__MODEL_INFER_REQUEST__PARAMETERS_ENTRY__INIT};
    e[0].key = (char *)"truncate";
    e[0].value = &pb;
    e[1].key = (char *)"timeout";
    e[1].value = &pi;
    e[2].key = (char *)"direction";
    e[2].value = &ps;
    Inference__ModelInferRequest__ParametersEntry *ep[3] = {&e[0], &e[1], &e[2]};
    Inference__ModelInferRequest m = INFERENCE__MODEL_INFER_REQUEST__INIT;
    m.model_name = (char *)"minilm";
    m.n_parameters = 3;
    m.parameters = ep;
    /* through the wire and back, as the server receives it */
    size_t n = inference__model_infer_request__get_packed_size(&m);
    uint8_t *buf = malloc(n);
    inference__model_infer_request__pack(&m, buf);
    Inference__ModelInferRequest *u = inference__model_infer_request__unpack(NULL, n, buf);
    ck_assert_ptr_nonnull(u);
    cJSON *p = pbjson_decode_field(&u->base, "parameters");
    char *s = cJSON_PrintUnformatted(p);
    ck_assert_str_eq(s, "{\"truncate\":false,\"timeout\":-5,\"direction\":\"left\"}");
    free(s);
    cJSON_Delete(p);
    cJSON *all = pbjson_decode(&u->base);
    s = cJSON_PrintUnformatted(all);
    /* defaults (an empty id, no inputs) are left out */
    ck_assert_str_eq(s, "{\"model_name\":\"minilm\",\"parameters\":{\"truncate\":false,"
                        "\"timeout\":-5,\"direction\":\"left\"}}");
    free(s);
    cJSON_Delete(all);
    inference__model_infer_request__free_unpacked(u, NULL);
    free(buf);
}
END_TEST

START_TEST(pbjson_refuses_strings_that_are_not_utf8_or_hold_nul)
{
    char why[256];
    /* ModelReadyRequest: name (1), version (2) */
    static const uint8_t ok[] = {0x0a, 0x06, 'm', 'i', 'n', 'i', 'l', 'm', 0x12, 0x02, 0xc3, 0xa9};
    ck_assert(pbjson_check_strings(&inference__model_ready_request__descriptor, ok, sizeof ok,
                                   why, sizeof why));
    static const uint8_t nul[] = {0x0a, 0x03, 'a', 0x00, 'b'};
    ck_assert(!pbjson_check_strings(&inference__model_ready_request__descriptor, nul, sizeof nul,
                                    why, sizeof why));
    ck_assert_msg(strstr(why, "ModelReadyRequest.name"), "%s", why);
    static const uint8_t overlong[] = {0x12, 0x02, 0xc0, 0xaf};
    ck_assert(!pbjson_check_strings(&inference__model_ready_request__descriptor, overlong,
                                    sizeof overlong, why, sizeof why));
    ck_assert_msg(strstr(why, "version"), "%s", why);
    /* nested: ModelInferRequest.inputs[0].name */
    static const uint8_t nested[] = {0x2a, 0x03, 0x0a, 0x01, 0xff};
    ck_assert(!pbjson_check_strings(&inference__model_infer_request__descriptor, nested,
                                    sizeof nested, why, sizeof why));
    ck_assert_msg(strstr(why, "InferInputTensor.name"), "%s", why);
    /* bytes fields are not text: raw_input_contents (7) may hold anything */
    static const uint8_t raw[] = {0x3a, 0x02, 0x00, 0xff};
    ck_assert(pbjson_check_strings(&inference__model_infer_request__descriptor, raw, sizeof raw,
                                   why, sizeof why));
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("pbjson");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, pbjson_encodes_an_infer_response_protobuf_c_reads);
    tcase_add_test(tc, pbjson_encodes_enums_by_name_and_negative_dims);
    tcase_add_test(tc, pbjson_decodes_parameters_as_plain_values);
    tcase_add_test(tc, pbjson_refuses_strings_that_are_not_utf8_or_hold_nul);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
