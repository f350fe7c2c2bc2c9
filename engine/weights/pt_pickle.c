/* pt_pickle.c: the pickle machine of the PyTorch checkpoint reader
 * (pt_vm.h): its values, stack, MARKs and memo, the operands, and the
 * opcodes that only move data: constants NONE, NEWTRUE, NEWFALSE, BININT,
 * BININT1, BININT2, LONG1 (up to 8 bytes), BINFLOAT, SHORT_BINUNICODE,
 * BINUNICODE, BINUNICODE8; containers MARK, EMPTY_DICT, EMPTY_LIST,
 * EMPTY_TUPLE, TUPLE, TUPLE1-3, SETITEM, SETITEMS, APPEND, APPENDS; the memo
 * BINPUT, LONG_BINPUT, MEMOIZE, BINGET, LONG_BINGET (the semantics as
 * Python's pickletools documents them). What may build or call something
 * (globals, persistent ids, REDUCE, BUILD) and the loop are in
 * pt_unpickle.c.
 *
 * Values live in one growable table (containers as linked cells in a
 * second); the stack and memo hold indices into it. Nothing recurses, and
 * every table, string, index and nesting of MARKs has a limit
 * (pt_internal.h), so a hostile pickle is an error message naming the byte
 * and opcode at fault.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/weights/pt_vm.h"

static const char *const pv_kind_names[] = {
    "None", "a bool", "an int", "a float", "a str", "a tuple", "a list", "a dict",
    "a global", "a storage", "a tensor",
};

/* Every opcode of protocols 0-5 by name, for messages (known or refused). */
static const char *const pv_op_names[256] = {
    ['('] = "MARK", ['.'] = "STOP", ['0'] = "POP", ['1'] = "POP_MARK", ['2'] = "DUP",
    ['F'] = "FLOAT", ['I'] = "INT", ['J'] = "BININT", ['K'] = "BININT1", ['L'] = "LONG",
    ['M'] = "BININT2", ['N'] = "NONE", ['P'] = "PERSID", ['Q'] = "BINPERSID",
    ['R'] = "REDUCE", ['S'] = "STRING", ['T'] = "BINSTRING", ['U'] = "SHORT_BINSTRING",
    ['V'] = "UNICODE", ['X'] = "BINUNICODE", ['a'] = "APPEND", ['b'] = "BUILD",
    ['c'] = "GLOBAL", ['d'] = "DICT", ['}'] = "EMPTY_DICT", ['e'] = "APPENDS",
    ['g'] = "GET", ['h'] = "BINGET", ['i'] = "INST", ['j'] = "LONG_BINGET", ['l'] = "LIST",
    [']'] = "EMPTY_LIST", ['o'] = "OBJ", ['p'] = "PUT", ['q'] = "BINPUT",
    ['r'] = "LONG_BINPUT", ['s'] = "SETITEM", ['t'] = "TUPLE", [')'] = "EMPTY_TUPLE",
    ['u'] = "SETITEMS", ['G'] = "BINFLOAT", [0x80] = "PROTO", [0x81] = "NEWOBJ",
    [0x82] = "EXT1", [0x83] = "EXT2", [0x84] = "EXT4", [0x85] = "TUPLE1", [0x86] = "TUPLE2",
    [0x87] = "TUPLE3", [0x88] = "NEWTRUE", [0x89] = "NEWFALSE", [0x8a] = "LONG1",
    [0x8b] = "LONG4", ['B'] = "BINBYTES", ['C'] = "SHORT_BINBYTES",
    [0x8c] = "SHORT_BINUNICODE", [0x8d] = "BINUNICODE8", [0x8e] = "BINBYTES8",
    [0x8f] = "EMPTY_SET", [0x90] = "ADDITEMS", [0x91] = "FROZENSET", [0x92] = "NEWOBJ_EX",
    [0x93] = "STACK_GLOBAL", [0x94] = "MEMOIZE", [0x95] = "FRAME", [0x96] = "BYTEARRAY8",
    [0x97] = "NEXT_BUFFER", [0x98] = "READONLY_BUFFER",
};

bool pv_op_known(unsigned char op)
{
    return pv_op_names[op] != NULL;
}

void pv_error(pv_vm *vm, mt_status st, const char *fmt, ...)
{
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *name = pv_op_names[vm->op];
    vm->st = mt_fail(vm->err, st, "%s: %s: at byte %zu, %s: %s", vm->label, vm->entry,
                     vm->op_at, name ? name : "opcode", msg);
}

int pv_grow(pv_vm *vm, void **arr, size_t *cap, size_t need, size_t el, size_t max,
            const char *what)
{
    if (need <= *cap)
        return 0;
    if (need > max)
        return pv_fail(vm, MT_ELIMIT, "more than %zu %s", max, what);
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c = c > max / 2 ? max : 2 * c;
    void *g = realloc(*arr, c * el);
    if (!g)
        return pv_fail(vm, MT_ENOMEM, "out of memory for %zu %s", c, what);
    *arr = g;
    *cap = c;
    return 0;
}

int64_t pv_new(pv_vm *vm, pv_kind k)
{
    if (pv_grow(vm, (void **)&vm->obj, &vm->cap_obj, vm->nobj + 1, sizeof *vm->obj,
                PT_MAX_OBJECTS, "values"))
        return -1;
    vm->obj[vm->nobj] = (pv_obj){.kind = (uint8_t)k};
    return (int64_t)vm->nobj++;
}

int pv_push(pv_vm *vm, int64_t o)
{
    if (o < 0 || pv_grow(vm, (void **)&vm->stack, &vm->cap_stack, vm->sp + 1,
                         sizeof *vm->stack, PT_MAX_STACK, "values on the stack"))
        return -1;
    vm->stack[vm->sp++] = (uint32_t)o;
    return 0;
}

/* Values above the innermost MARK (the fence). */
static size_t pv_above_fence(const pv_vm *vm)
{
    return vm->sp - (vm->nmarks ? vm->marks[vm->nmarks - 1] : 0);
}

/* Pops the top value into *o (not across a MARK). */
int pv_pop(pv_vm *vm, uint32_t *o)
{
    if (pv_above_fence(vm) < 1)
        return pv_fail(vm, MT_EFORMAT, "stack underflow");
    *o = vm->stack[--vm->sp];
    return 0;
}

/* The top value (not across a MARK), left on the stack. */
static int pv_top(pv_vm *vm, uint32_t *o)
{
    if (pv_above_fence(vm) < 1)
        return pv_fail(vm, MT_EFORMAT, "stack underflow");
    *o = vm->stack[vm->sp - 1];
    return 0;
}

/* Appends value v to container c's cells. */
static int pv_add(pv_vm *vm, uint32_t c, uint32_t v)
{
    if (pv_grow(vm, (void **)&vm->cell, &vm->cap_cell, vm->ncell + 1, sizeof *vm->cell,
                PT_MAX_OBJECTS, "container items"))
        return -1;
    vm->cell[vm->ncell] = (pv_cell){.obj = v, .next = 0};
    pv_obj *o = &vm->obj[c];
    if (o->tail)
        vm->cell[o->tail - 1].next = (uint32_t)vm->ncell + 1;
    else
        o->head = (uint32_t)vm->ncell + 1;
    o->tail = (uint32_t)++vm->ncell;
    o->len++;
    return 0;
}

uint32_t pv_items(const pv_vm *vm, uint32_t c, uint32_t *items, uint32_t max)
{
    uint32_t k = 0;
    for (uint32_t at = vm->obj[c].head; at && k < max; at = vm->cell[at - 1].next)
        items[k++] = vm->cell[at - 1].obj;
    return k;
}

const char *pv_kind_name(const pv_vm *vm, uint32_t o)
{
    return pv_kind_names[vm->obj[o].kind];
}

/* ======================================================================
 * reading operands
 * ====================================================================== */

int pv_need(pv_vm *vm, size_t k)
{
    if (vm->n - vm->pos < k)
        return pv_fail(vm, MT_EFORMAT, "cut short: %zu operand bytes, %zu left", k,
                       vm->n - vm->pos);
    return 0;
}

/* A little-endian unsigned operand of k (<= 8) bytes. */
static int pv_uint(pv_vm *vm, size_t k, uint64_t *v)
{
    if (pv_need(vm, k))
        return -1;
    *v = 0;
    for (size_t i = k; i-- > 0;)
        *v = *v << 8 | vm->p[vm->pos + i];
    vm->pos += k;
    return 0;
}

static int pv_push_int(pv_vm *vm, int64_t v)
{
    int64_t o = pv_new(vm, PV_INT);
    if (o >= 0)
        vm->obj[o].u.i = v;
    return pv_push(vm, o);
}

/* A string operand of len bytes at the cursor. */
static int pv_push_str(pv_vm *vm, uint64_t len)
{
    if (len > PT_MAX_STRING)
        return pv_fail(vm, MT_ELIMIT, "a %" PRIu64 "-byte string, over the %u-byte limit", len,
                       PT_MAX_STRING);
    if (pv_need(vm, (size_t)len))
        return -1;
    int64_t o = pv_new(vm, PV_STR);
    if (o >= 0) {
        vm->obj[o].u.s.off = vm->pos;
        vm->obj[o].u.s.len = (size_t)len;
    }
    vm->pos += (size_t)len;
    return pv_push(vm, o);
}

/* LONG1: a two's complement little-endian integer of up to 8 bytes. */
static int pv_long1(pv_vm *vm)
{
    uint64_t k, v;
    if (pv_uint(vm, 1, &k))
        return -1;
    if (k > 8)
        return pv_fail(vm, MT_EFORMAT, "a %" PRIu64 "-byte integer: more than 64 bits", k);
    if (pv_uint(vm, (size_t)k, &v))
        return -1;
    if (k > 0 && k < 8 && (v >> (8 * k - 1)) & 1)
        v |= ~(uint64_t)0 << (8 * k); /* sign-extend */
    return pv_push_int(vm, (int64_t)v);
}

/* BINFLOAT: a big-endian IEEE double. */
static int pv_binfloat(pv_vm *vm)
{
    if (pv_need(vm, 8))
        return -1;
    uint64_t bits = 0;
    for (int i = 0; i < 8; i++)
        bits = bits << 8 | vm->p[vm->pos + i];
    vm->pos += 8;
    int64_t o = pv_new(vm, PV_FLOAT);
    if (o >= 0)
        memcpy(&vm->obj[o].u.f, &bits, sizeof bits);
    return pv_push(vm, o);
}

/* Constants and strings; 1 when op is not one of them. */
int pv_op_const(pv_vm *vm, unsigned char op)
{
    uint64_t v;
    int64_t o;
    switch (op) {
    case 'N':
        return pv_push(vm, pv_new(vm, PV_NONE));
    case 0x88:
    case 0x89:
        if ((o = pv_new(vm, PV_BOOL)) >= 0)
            vm->obj[o].u.i = op == 0x88;
        return pv_push(vm, o);
    case 'J':
        return pv_uint(vm, 4, &v) ? -1 : pv_push_int(vm, (int32_t)(uint32_t)v);
    case 'K':
        return pv_uint(vm, 1, &v) ? -1 : pv_push_int(vm, (int64_t)v);
    case 'M':
        return pv_uint(vm, 2, &v) ? -1 : pv_push_int(vm, (int64_t)v);
    case 0x8a:
        return pv_long1(vm);
    case 'G':
        return pv_binfloat(vm);
    case 0x8c:
        return pv_uint(vm, 1, &v) ? -1 : pv_push_str(vm, v);
    case 'X':
        return pv_uint(vm, 4, &v) ? -1 : pv_push_str(vm, v);
    case 0x8d:
        return pv_uint(vm, 8, &v) ? -1 : pv_push_str(vm, v);
    default:
        return 1;
    }
}

/* ======================================================================
 * containers and the memo
 * ====================================================================== */

static int pv_mark(pv_vm *vm)
{
    if (vm->nmarks == PT_MAX_MARKS)
        return pv_fail(vm, MT_ELIMIT, "more than %d nested MARKs", PT_MAX_MARKS);
    vm->marks[vm->nmarks++] = vm->sp;
    return 0;
}

/* Closes the innermost MARK: *base is where its values start. */
static int pv_pop_mark(pv_vm *vm, size_t *base)
{
    if (vm->nmarks == 0)
        return pv_fail(vm, MT_EFORMAT, "no MARK to close");
    *base = vm->marks[--vm->nmarks];
    return 0;
}

/* A tuple of the stack's values from base up, which it replaces. */
static int pv_tuple_from(pv_vm *vm, size_t base)
{
    int64_t t = pv_new(vm, PV_TUPLE);
    if (t < 0)
        return -1;
    for (size_t i = base; i < vm->sp; i++)
        if (pv_add(vm, (uint32_t)t, vm->stack[i]))
            return -1;
    vm->sp = base;
    return pv_push(vm, t);
}

/* The container the values from base up go into (at base - 1, above the
 * enclosing fence), checked to be of kind k. */
static int pv_target(pv_vm *vm, size_t base, pv_kind k, uint32_t *c)
{
    size_t fence = vm->nmarks ? vm->marks[vm->nmarks - 1] : 0;
    if (base <= fence)
        return pv_fail(vm, MT_EFORMAT, "stack underflow");
    *c = vm->stack[base - 1];
    if (vm->obj[*c].kind != k)
        return pv_fail(vm, MT_EFORMAT, "adds to %s, not %s", pv_kind_name(vm, *c),
                       pv_kind_names[k]);
    return 0;
}

/* APPEND(S) / SETITEM(S): the values from base up into the container
 * below them (pairs for a dict). */
static int pv_fill(pv_vm *vm, size_t base, pv_kind k)
{
    uint32_t c;
    if (pv_target(vm, base, k, &c))
        return -1;
    if (k == PV_DICT && (vm->sp - base) % 2)
        return pv_fail(vm, MT_EFORMAT, "an odd number of values (%zu) for keys and values",
                       vm->sp - base);
    for (size_t i = base; i < vm->sp; i++)
        if (pv_add(vm, c, vm->stack[i]))
            return -1;
    vm->sp = base;
    return 0;
}

/* Containers; 1 when op is not one of them. */
int pv_op_container(pv_vm *vm, unsigned char op)
{
    size_t base;
    switch (op) {
    case '(':
        return pv_mark(vm);
    case ')':
        return pv_push(vm, pv_new(vm, PV_TUPLE));
    case ']':
        return pv_push(vm, pv_new(vm, PV_LIST));
    case '}':
        return pv_push(vm, pv_new(vm, PV_DICT));
    case 't':
        return pv_pop_mark(vm, &base) ? -1 : pv_tuple_from(vm, base);
    case 0x85:
    case 0x86:
    case 0x87:
        base = (size_t)(op - 0x84);
        if (pv_above_fence(vm) < base)
            return pv_fail(vm, MT_EFORMAT, "stack underflow");
        return pv_tuple_from(vm, vm->sp - base);
    case 'a':
    case 's':
        base = op == 'a' ? 1 : 2;
        if (pv_above_fence(vm) < base)
            return pv_fail(vm, MT_EFORMAT, "stack underflow");
        return pv_fill(vm, vm->sp - base, op == 'a' ? PV_LIST : PV_DICT);
    case 'e':
    case 'u':
        return pv_pop_mark(vm, &base) ? -1 : pv_fill(vm, base, op == 'e' ? PV_LIST : PV_DICT);
    default:
        return 1;
    }
}

/* memo[idx] = the top value. */
static int pv_put(pv_vm *vm, uint64_t idx)
{
    uint32_t o;
    if (idx >= PT_MAX_MEMO)
        return pv_fail(vm, MT_ELIMIT, "memo index %" PRIu64 " over the limit of %u", idx,
                       PT_MAX_MEMO);
    if (pv_top(vm, &o))
        return -1;
    size_t old = vm->cap_memo;
    if (pv_grow(vm, (void **)&vm->memo, &vm->cap_memo, (size_t)idx + 1, sizeof *vm->memo,
                PT_MAX_MEMO, "memo entries"))
        return -1;
    memset(vm->memo + old, 0, (vm->cap_memo - old) * sizeof *vm->memo);
    vm->memo_count += vm->memo[idx] == 0;
    vm->memo[idx] = o + 1;
    return 0;
}

static int pv_get(pv_vm *vm, uint64_t idx)
{
    if (idx >= vm->cap_memo || vm->memo[idx] == 0)
        return pv_fail(vm, MT_EFORMAT, "memo index %" PRIu64 " was never set", idx);
    return pv_push(vm, vm->memo[idx] - 1);
}

/* The memo; 1 when op is not one of its opcodes. */
int pv_op_memo(pv_vm *vm, unsigned char op)
{
    uint64_t idx;
    switch (op) {
    case 'q':
        return pv_uint(vm, 1, &idx) ? -1 : pv_put(vm, idx);
    case 'r':
        return pv_uint(vm, 4, &idx) ? -1 : pv_put(vm, idx);
    case 0x94:
        return pv_put(vm, vm->memo_count);
    case 'h':
        return pv_uint(vm, 1, &idx) ? -1 : pv_get(vm, idx);
    case 'j':
        return pv_uint(vm, 4, &idx) ? -1 : pv_get(vm, idx);
    default:
        return 1;
    }
}

