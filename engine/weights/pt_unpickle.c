/* pt_unpickle.c: the restricted half of the PyTorch checkpoint reader's
 * pickle machine (pt_vm.h; the data opcodes are in pt_pickle.c): PROTO (2
 * to 5), FRAME, STOP, the globals (GLOBAL, STACK_GLOBAL), persistent ids
 * (BINPERSID), REDUCE and BUILD, the loop, and the state dict it yields
 * (pt_unpickle, pt_internal.h).
 *
 * Nothing is imported or called: a global is a name looked up in an
 * allow-list (collections.OrderedDict, torch._utils' _rebuild_tensor_v2,
 * _rebuild_tensor_v3 and _rebuild_parameter, torch's typed storage classes,
 * torch.storage.UntypedStorage, torch's dtypes), and REDUCE on one of the
 * four callables builds our own value for it; any other global (os.system,
 * builtins.eval, ...) is refused by name, and so is any opcode torch.save
 * does not write for a state dict. A persistent id must be torch's
 * ('storage', <storage class>, <key>, <location>, <numel>). BUILD on a dict
 * (the _metadata attribute torch sets on an OrderedDict state dict) is
 * accepted and its state dropped; on anything else it is refused. Tensor
 * metadata (_rebuild_tensor_v2's 7th argument) other than None or an empty
 * dict is refused: it can set the conjugate or negative bit, which would
 * change what the bytes mean.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/weights/pt_vm.h"

typedef enum { PG_ORDERED_DICT, PG_REBUILD_V2, PG_REBUILD_V3, PG_PARAMETER, PG_STORAGE, PG_DTYPE } pg_kind;

/* The allow-list: every global a state dict saved by torch >= 1.6 uses. */
static const struct {
    const char *module, *name;
    pg_kind kind;
    int dtype;
} pv_globals[] = {
    {"collections", "OrderedDict", PG_ORDERED_DICT, 0},
    {"torch._utils", "_rebuild_tensor_v2", PG_REBUILD_V2, 0},
    {"torch._utils", "_rebuild_tensor_v3", PG_REBUILD_V3, 0},
    {"torch._utils", "_rebuild_parameter", PG_PARAMETER, 0},
    {"torch", "FloatStorage", PG_STORAGE, ST_F32},
    {"torch", "HalfStorage", PG_STORAGE, ST_F16},
    {"torch", "BFloat16Storage", PG_STORAGE, ST_BF16},
    {"torch", "DoubleStorage", PG_STORAGE, ST_F64},
    {"torch", "LongStorage", PG_STORAGE, ST_I64},
    {"torch", "IntStorage", PG_STORAGE, ST_I32},
    {"torch", "ShortStorage", PG_STORAGE, ST_I16},
    {"torch", "CharStorage", PG_STORAGE, ST_I8},
    {"torch", "ByteStorage", PG_STORAGE, ST_U8},
    {"torch", "BoolStorage", PG_STORAGE, ST_BOOL},
    {"torch.storage", "UntypedStorage", PG_STORAGE, PT_UNTYPED},
    {"torch", "float32", PG_DTYPE, ST_F32},
    {"torch", "float16", PG_DTYPE, ST_F16},
    {"torch", "bfloat16", PG_DTYPE, ST_BF16},
    {"torch", "float64", PG_DTYPE, ST_F64},
    {"torch", "int64", PG_DTYPE, ST_I64},
    {"torch", "int32", PG_DTYPE, ST_I32},
    {"torch", "int16", PG_DTYPE, ST_I16},
    {"torch", "int8", PG_DTYPE, ST_I8},
    {"torch", "uint8", PG_DTYPE, ST_U8},
    {"torch", "bool", PG_DTYPE, ST_BOOL},
    {"torch", "uint16", PG_DTYPE, ST_U16},
    {"torch", "uint32", PG_DTYPE, ST_U32},
    {"torch", "uint64", PG_DTYPE, ST_U64},
    {"torch", "float8_e4m3fn", PG_DTYPE, ST_F8_E4M3},
    {"torch", "float8_e5m2", PG_DTYPE, ST_F8_E5M2},
};
#define PV_NGLOBALS (sizeof pv_globals / sizeof pv_globals[0])


/* A str value's bytes, or a failure naming what (which argument) it is. */
static int pv_str(pv_vm *vm, uint32_t o, const char *what, const unsigned char **s, size_t *n)
{
    if (vm->obj[o].kind != PV_STR)
        return pv_fail(vm, MT_EFORMAT, "%s is %s, not a str", what, pv_kind_name(vm, o));
    *s = vm->p + vm->obj[o].u.s.off;
    *n = vm->obj[o].u.s.len;
    return 0;
}

/* Looks module.name up in the allow-list and pushes it. */
static int pv_push_global(pv_vm *vm, const unsigned char *mod, size_t ml,
                          const unsigned char *name, size_t nl)
{
    for (size_t g = 0; g < PV_NGLOBALS; g++) {
        if (strlen(pv_globals[g].module) == ml && !memcmp(pv_globals[g].module, mod, ml) &&
            strlen(pv_globals[g].name) == nl && !memcmp(pv_globals[g].name, name, nl)) {
            int64_t o = pv_new(vm, PV_GLOBAL);
            if (o >= 0)
                vm->obj[o].u.ref = (uint32_t)g;
            return pv_push(vm, o);
        }
    }
    return pv_fail(vm, MT_EFORMAT,
                   "global %s.%s is not allowed (only torch's tensor and storage rebuilders, "
                   "dtypes and collections.OrderedDict are)",
                   ST_SHOW_N(mod, ml), ST_SHOW_N(name, nl));
}

/* GLOBAL's operand: two lines, "module\nname\n". */
static int pv_global(pv_vm *vm)
{
    const unsigned char *line[2];
    size_t len[2];
    for (int i = 0; i < 2; i++) {
        size_t max = vm->n - vm->pos < 256 ? vm->n - vm->pos : 256;
        const unsigned char *nl = memchr(vm->p + vm->pos, '\n', max);
        if (!nl)
            return pv_fail(vm, MT_EFORMAT, "no end of line in the %zu bytes after it", max);
        line[i] = vm->p + vm->pos;
        len[i] = (size_t)(nl - line[i]);
        vm->pos += len[i] + 1;
    }
    return pv_push_global(vm, line[0], len[0], line[1], len[1]);
}

static int pv_stack_global(pv_vm *vm)
{
    uint32_t m, n;
    const unsigned char *ms, *ns;
    size_t ml, nl;
    if (pv_pop(vm, &n) || pv_pop(vm, &m) || pv_str(vm, m, "the module", &ms, &ml) ||
        pv_str(vm, n, "the name", &ns, &nl))
        return -1;
    return pv_push_global(vm, ms, ml, ns, nl);
}

/* An int value >= 0. */
static int pv_nonneg(pv_vm *vm, uint32_t o, const char *what, uint64_t *v)
{
    if (vm->obj[o].kind != PV_INT || vm->obj[o].u.i < 0)
        return pv_fail(vm, MT_EFORMAT, "%s is %s, not an int >= 0", what,
                       vm->obj[o].kind == PV_INT ? "negative" : pv_kind_name(vm, o));
    *v = (uint64_t)vm->obj[o].u.i;
    return 0;
}

/* A global of kind k: its allow-list row. */
static int pv_global_of(pv_vm *vm, uint32_t o, pg_kind k, const char *what, uint32_t *row)
{
    if (vm->obj[o].kind != PV_GLOBAL || pv_globals[vm->obj[o].u.ref].kind != k)
        return pv_fail(vm, MT_EFORMAT, "%s is %s, not a torch %s", what, pv_kind_name(vm, o),
                       k == PG_STORAGE ? "storage class" : "dtype");
    *row = vm->obj[o].u.ref;
    return 0;
}

/* BINPERSID: torch's ('storage', class, key, location, numel) becomes a
 * storage value. */
static int pv_persid(pv_vm *vm)
{
    uint32_t pid, it[5], cls;
    const unsigned char *tag, *key, *loc;
    size_t tl, kl, ll;
    uint64_t numel;
    if (pv_pop(vm, &pid))
        return -1;
    if (vm->obj[pid].kind != PV_TUPLE || vm->obj[pid].len != 5)
        return pv_fail(vm, MT_EFORMAT, "the persistent id is %s%s, not torch's ('storage', "
                       "class, key, location, numel)", pv_kind_name(vm, pid),
                       vm->obj[pid].kind == PV_TUPLE ? " of another length" : "");
    pv_items(vm, pid, it, 5);
    if (pv_str(vm, it[0], "the persistent id's tag", &tag, &tl))
        return -1;
    if (tl != 7 || memcmp(tag, "storage", 7))
        return pv_fail(vm, MT_EFORMAT, "persistent id '%s': only 'storage' ids are read",
                       ST_SHOW_N(tag, tl));
    if (pv_global_of(vm, it[1], PG_STORAGE, "the storage's class", &cls) ||
        pv_str(vm, it[2], "the storage's key", &key, &kl) ||
        pv_str(vm, it[3], "the storage's location", &loc, &ll) ||
        pv_nonneg(vm, it[4], "the storage's size", &numel) ||
        pv_grow(vm, (void **)&vm->stor, &vm->cap_stor, vm->nstor + 1, sizeof *vm->stor,
                PT_MAX_TENSORS, "storages"))
        return -1;
    vm->stor[vm->nstor] = (pv_storage){.key_off = (size_t)(key - vm->p), .key_len = kl,
                                       .dtype = pv_globals[cls].dtype, .numel = numel};
    int64_t o = pv_new(vm, PV_STORAGE);
    if (o >= 0)
        vm->obj[o].u.ref = (uint32_t)vm->nstor++;
    return pv_push(vm, o);
}

/* A size or stride: a tuple of at most ST_MAX_DIMS ints >= 0. */
static int pv_dims(pv_vm *vm, uint32_t o, const char *what, int64_t *dims, int *ndim)
{
    uint32_t it[ST_MAX_DIMS];
    if (vm->obj[o].kind != PV_TUPLE)
        return pv_fail(vm, MT_EFORMAT, "the %s is %s, not a tuple", what, pv_kind_name(vm, o));
    if (vm->obj[o].len > ST_MAX_DIMS)
        return pv_fail(vm, MT_ELIMIT, "the %s has %u dims, more than the %d supported", what,
                       vm->obj[o].len, ST_MAX_DIMS);
    *ndim = (int)pv_items(vm, o, it, ST_MAX_DIMS);
    for (int i = 0; i < *ndim; i++) {
        uint64_t v;
        if (pv_nonneg(vm, it[i], what, &v))
            return -1;
        dims[i] = (int64_t)v; /* an int64_t >= 0 */
    }
    return 0;
}

/* The arguments after size and stride: requires_grad, backward_hooks, the
 * dtype (v3) and the optional metadata; sets t->dtype. */
static int pv_rebuild_rest(pv_vm *vm, const uint32_t *a, uint32_t n, bool v3, pv_tensor *t)
{
    const uint32_t want = v3 ? 7 : 6;
    const int sdt = vm->stor[t->storage].dtype;
    uint32_t row;
    if (vm->obj[a[4]].kind != PV_BOOL)
        return pv_fail(vm, MT_EFORMAT, "requires_grad is %s, not a bool", pv_kind_name(vm, a[4]));
    if (vm->obj[a[5]].kind != PV_DICT)
        return pv_fail(vm, MT_EFORMAT, "backward_hooks is %s, not a dict",
                       pv_kind_name(vm, a[5]));
    if (v3) {
        if (pv_global_of(vm, a[6], PG_DTYPE, "the dtype", &row))
            return -1;
        t->dtype = (st_dtype)pv_globals[row].dtype;
        if (sdt != PT_UNTYPED && sdt != (int)t->dtype)
            return pv_fail(vm, MT_EFORMAT, "a tensor of %s on a storage of %s",
                           st_dtype_name(t->dtype), st_dtype_name((st_dtype)sdt));
    } else {
        if (sdt == PT_UNTYPED)
            return pv_fail(vm, MT_EFORMAT,
                           "an untyped storage without _rebuild_tensor_v3's dtype");
        t->dtype = (st_dtype)sdt;
    }
    if (n > want && vm->obj[a[want]].kind != PV_NONE &&
        !(vm->obj[a[want]].kind == PV_DICT && vm->obj[a[want]].len == 0))
        return pv_fail(vm, MT_EFORMAT, "tensor metadata (%s) is not read: it may set the "
                       "conjugate or negative bit", pv_kind_name(vm, a[want]));
    return 0;
}

/* _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
 * backward_hooks[, metadata]), _v3 with the dtype before the metadata. */
static int pv_rebuild(pv_vm *vm, const uint32_t *a, uint32_t n, bool v3)
{
    const uint32_t want = v3 ? 7 : 6;
    pv_tensor t = {0};
    int nd;
    if (n != want && n != want + 1)
        return pv_fail(vm, MT_EFORMAT, "_rebuild_tensor_v%d with %u arguments (%u or %u)",
                       v3 ? 3 : 2, n, want, want + 1);
    if (vm->obj[a[0]].kind != PV_STORAGE)
        return pv_fail(vm, MT_EFORMAT, "the storage is %s, not a persistent id's",
                       pv_kind_name(vm, a[0]));
    t.storage = vm->obj[a[0]].u.ref;
    if (pv_nonneg(vm, a[1], "the storage offset", &t.offset) ||
        pv_dims(vm, a[2], "size", t.shape, &t.ndim) || pv_dims(vm, a[3], "stride", t.stride, &nd))
        return -1;
    if (nd != t.ndim)
        return pv_fail(vm, MT_EFORMAT, "the size has %d dims but the stride %d", t.ndim, nd);
    if (pv_rebuild_rest(vm, a, n, v3, &t) ||
        pv_grow(vm, (void **)&vm->tens, &vm->cap_tens, vm->ntens + 1, sizeof *vm->tens,
                PT_MAX_TENSORS, "tensors"))
        return -1;
    vm->tens[vm->ntens] = t;
    int64_t o = pv_new(vm, PV_TENSOR);
    if (o >= 0)
        vm->obj[o].u.ref = (uint32_t)vm->ntens++;
    return pv_push(vm, o);
}

/* REDUCE: one of the allow-list's callables on a tuple of arguments. */
static int pv_reduce(pv_vm *vm)
{
    uint32_t args, fn, a[8] = {0};
    if (pv_pop(vm, &args) || pv_pop(vm, &fn))
        return -1;
    if (vm->obj[fn].kind != PV_GLOBAL)
        return pv_fail(vm, MT_EFORMAT, "calls %s, not a global", pv_kind_name(vm, fn));
    if (vm->obj[args].kind != PV_TUPLE)
        return pv_fail(vm, MT_EFORMAT, "the arguments are %s, not a tuple",
                       pv_kind_name(vm, args));
    const uint32_t g = vm->obj[fn].u.ref, n = vm->obj[args].len;
    pv_items(vm, args, a, 8);
    switch (pv_globals[g].kind) {
    case PG_ORDERED_DICT:
        if (n != 0)
            return pv_fail(vm, MT_EFORMAT, "collections.OrderedDict with %u arguments", n);
        return pv_push(vm, pv_new(vm, PV_DICT));
    case PG_REBUILD_V2:
    case PG_REBUILD_V3:
        return pv_rebuild(vm, a, n, pv_globals[g].kind == PG_REBUILD_V3);
    case PG_PARAMETER:
        if (n != 3 || vm->obj[a[0]].kind != PV_TENSOR || vm->obj[a[1]].kind != PV_BOOL ||
            vm->obj[a[2]].kind != PV_DICT)
            return pv_fail(vm, MT_EFORMAT, "_rebuild_parameter's arguments are not "
                           "(tensor, requires_grad, backward_hooks)");
        return pv_push(vm, a[0]); /* a Parameter is its tensor */
    default:
        return pv_fail(vm, MT_EFORMAT, "%s.%s is not callable here", pv_globals[g].module,
                       pv_globals[g].name);
    }
}

/* BUILD: the state of an OrderedDict (its _metadata) is dropped. */
static int pv_build(pv_vm *vm)
{
    uint32_t state, o;
    if (pv_pop(vm, &state) || pv_pop(vm, &o))
        return -1;
    if (vm->obj[o].kind != PV_DICT)
        return pv_fail(vm, MT_EFORMAT, "sets the state of %s; only a dict's (an OrderedDict's "
                       "_metadata) is read", pv_kind_name(vm, o));
    return pv_push(vm, o);
}

/* PROTO, FRAME, STOP and what may build or call; 1 when op is none of them. */
static int pv_op_call(pv_vm *vm, unsigned char op)
{
    uint64_t v = 0;
    switch (op) {
    case 0x80:
        if (pv_need(vm, 1))
            return -1;
        v = vm->p[vm->pos++];
        if (v < 2 || v > 5)
            return pv_fail(vm, MT_EFORMAT, "protocol %" PRIu64 " (2 to 5 are read)", v);
        return 0;
    case 0x95: /* a frame only groups opcodes: check its length, run on */
        if (pv_need(vm, 8))
            return -1;
        for (int i = 7; i >= 0; i--)
            v = v << 8 | vm->p[vm->pos + (size_t)i];
        vm->pos += 8;
        return v > vm->n - vm->pos ? pv_fail(vm, MT_EFORMAT, "a %" PRIu64 "-byte frame, %zu "
                                             "bytes left", v, vm->n - vm->pos) : 0;
    case '.':
        vm->stopped = true;
        return 0;
    case 'c':
        return pv_global(vm);
    case 0x93:
        return pv_stack_global(vm);
    case 'Q':
        return pv_persid(vm);
    case 'R':
        return pv_reduce(vm);
    case 'b':
        return pv_build(vm);
    default:
        return 1;
    }
}

/* The stopped machine's one value: a dict of str keys to tensors, into out. */
static int pv_result(pv_vm *vm, pt_tensor **out, size_t *count)
{
    if (vm->sp != 1 || vm->nmarks)
        return pv_fail(vm, MT_EFORMAT, "ends with %zu values and %d MARKs on the stack, not "
                       "one value", vm->sp, vm->nmarks);
    const uint32_t top = vm->stack[0];
    if (vm->obj[top].kind != PV_DICT)
        return pv_fail(vm, MT_EFORMAT, "the saved object is %s, not a dict of tensors (a "
                       "state dict)", pv_kind_name(vm, top));
    if (!(*out = calloc(vm->obj[top].len / 2 + 1, sizeof **out)))
        return pv_fail(vm, MT_ENOMEM, "out of memory");
    /* a dict's cells come in pairs (pv_fill), key then value */
    for (uint32_t at = vm->obj[top].head, vat; at && (vat = vm->cell[at - 1].next);
         at = vm->cell[vat - 1].next) {
        const uint32_t k = vm->cell[at - 1].obj, v = vm->cell[vat - 1].obj;
        pt_tensor *t = &(*out)[*count];
        if (pv_str(vm, k, "a key of the saved dict", &t->name, &t->name_len))
            return -1;
        const char *key = ST_SHOW_N(t->name, t->name_len);
        if (vm->obj[v].kind == PV_DICT)
            return pv_fail(vm, MT_EFORMAT, "key '%s' holds a dict: a nested state dict (a "
                           "training checkpoint?) is not read; save the model's state_dict() "
                           "itself", key);
        if (vm->obj[v].kind != PV_TENSOR)
            return pv_fail(vm, MT_EFORMAT, "key '%s' holds %s, not a tensor", key,
                           pv_kind_name(vm, v));
        const pv_tensor *pt = &vm->tens[vm->obj[v].u.ref];
        const pv_storage *s = &vm->stor[pt->storage];
        t->key = vm->p + s->key_off;
        t->key_len = s->key_len;
        t->storage_dtype = s->dtype;
        t->storage_numel = s->numel;
        t->dtype = pt->dtype;
        t->offset = pt->offset;
        t->ndim = pt->ndim;
        memcpy(t->shape, pt->shape, sizeof t->shape);
        memcpy(t->stride, pt->stride, sizeof t->stride);
        ++*count;
    }
    return 0;
}

/* One opcode. */
static int pv_step(pv_vm *vm)
{
    vm->op_at = vm->pos;
    vm->op = vm->p[vm->pos++];
    int r;
    if ((r = pv_op_const(vm, vm->op)) != 1 || (r = pv_op_container(vm, vm->op)) != 1 ||
        (r = pv_op_memo(vm, vm->op)) != 1 || (r = pv_op_call(vm, vm->op)) != 1)
        return r;
    if (pv_op_known(vm->op))
        return pv_fail(vm, MT_EFORMAT, "not one of the opcodes torch.save writes for a state "
                       "dict");
    return pv_fail(vm, MT_EFORMAT, "0x%02x is not a pickle opcode", vm->op);
}

mt_status pt_unpickle(const unsigned char *p, size_t n, const char *label, const char *entry,
                      pt_tensor **out, size_t *count, mt_err *err)
{
    *out = NULL;
    *count = 0;
    if (n > PT_MAX_PICKLE)
        return mt_fail(err, MT_ELIMIT, "%s: %s: %zu bytes, over the %u-byte limit", label,
                       ST_SHOW(entry), n, PT_MAX_PICKLE);
    char shown[ST_SHOW_CAP];
    pv_vm vm = {.p = p, .n = n, .label = label, .entry = st_show(entry, shown), .err = err,
                .st = MT_OK};
    while (!vm.stopped && vm.pos < n && pv_step(&vm) == 0)
        ;
    if (vm.st == MT_OK && !vm.stopped)
        vm.st = mt_fail(err, MT_EFORMAT, "%s: %s: ends at byte %zu without STOP", label,
                        ST_SHOW(entry), n);
    if (vm.st == MT_OK)
        pv_result(&vm, out, count);
    if (vm.st != MT_OK) {
        free(*out);
        *out = NULL;
        *count = 0;
    }
    free(vm.obj);
    free(vm.cell);
    free(vm.stack);
    free(vm.memo);
    free(vm.stor);
    free(vm.tens);
    return vm.st;
}
