/* pt_vm.h: the pickle machine the PyTorch checkpoint reader runs data.pkl
 * on, shared by its two halves: pt_pickle.c (values, stack, memo, the
 * opcodes that only move data) and pt_unpickle.c (the allow-listed globals,
 * persistent ids, REDUCE, BUILD, the loop and the state dict it yields).
 * Functions that can fail return -1 after recording the error in the
 * machine (pv_fail), 0 when done, and the opcode groups 1 for "not mine".
 */
#ifndef MT_ENGINE_PT_VM_H
#define MT_ENGINE_PT_VM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/weights/pt_internal.h"

typedef enum {
    PV_NONE, PV_BOOL, PV_INT, PV_FLOAT, PV_STR, PV_TUPLE, PV_LIST, PV_DICT,
    PV_GLOBAL, PV_STORAGE, PV_TENSOR,
} pv_kind;

/* A value. Containers: cells head..tail (index + 1; 0 = none), len of them
 * (a dict's are key, value, key, value, ...). */
typedef struct {
    uint8_t kind;
    uint32_t head, tail, len;
    union {
        int64_t i;
        double f;
        struct {
            size_t off, len; /* a str: bytes of the pickle */
        } s;
        uint32_t ref; /* a global: pv_globals row; storage, tensor: their table's */
    } u;
} pv_obj;

/* One item of a container: a value and the next cell (index + 1, 0 = none). */
typedef struct {
    uint32_t obj, next;
} pv_cell;

/* A persistent id's storage: data/<key> of the pickle's bytes at key_off. */
typedef struct {
    size_t key_off, key_len;
    int dtype; /* st_dtype or PT_UNTYPED */
    uint64_t numel;
} pv_storage;

/* _rebuild_tensor_v2/_v3's tensor: a view of storage (its row). */
typedef struct {
    uint32_t storage;
    st_dtype dtype;
    uint64_t offset;
    int ndim;
    int64_t shape[ST_MAX_DIMS], stride[ST_MAX_DIMS];
} pv_tensor;

/* The machine: the pickle (p, n; pos the next byte), the tables, the error. */
typedef struct {
    const unsigned char *p;
    size_t n, pos, op_at; /* op_at: where the opcode being run is */
    unsigned char op;
    const char *label, *entry;
    mt_err *err;
    mt_status st;
    pv_obj *obj;
    size_t nobj, cap_obj;
    pv_cell *cell;
    size_t ncell, cap_cell;
    uint32_t *stack;
    size_t sp, cap_stack;
    size_t marks[PT_MAX_MARKS];
    int nmarks;
    uint32_t *memo; /* object index + 1, 0 = unset */
    size_t cap_memo, memo_count;
    pv_storage *stor;
    size_t nstor, cap_stor;
    pv_tensor *tens;
    size_t ntens, cap_tens;
    bool stopped;
} pv_vm;

/* Records an error naming the file, the entry, the byte and the opcode being
 * run. pv_fail is it as an expression of value -1, so that callers can
 * `return pv_fail(...)` (and the compiler sees the -1). */
__attribute__((format(printf, 3, 4))) void pv_error(pv_vm *vm, mt_status st, const char *fmt,
                                                    ...);
#define pv_fail(...) (pv_error(__VA_ARGS__), -1)
/* Grows *arr (elements of size el) to hold need, within max elements. */
int pv_grow(pv_vm *vm, void **arr, size_t *cap, size_t need, size_t el, size_t max,
            const char *what);
/* A new value of kind k: its index, or -1. */
int64_t pv_new(pv_vm *vm, pv_kind k);
/* Pushes value o (-1: the error of the pv_new that made it). */
int pv_push(pv_vm *vm, int64_t o);
/* Pops the top value (never across a MARK). */
int pv_pop(pv_vm *vm, uint32_t *o);
/* Up to max items of container c into items[]; their number. */
uint32_t pv_items(const pv_vm *vm, uint32_t c, uint32_t *items, uint32_t max);
/* "an int", "a dict", ...: the kind of value o, for messages. */
const char *pv_kind_name(const pv_vm *vm, uint32_t o);
/* Fails unless k operand bytes are left. */
int pv_need(pv_vm *vm, size_t k);
/* Whether op is an opcode of pickle protocols 0-5 (read here or not). */
bool pv_op_known(unsigned char op);
/* The opcode groups of pt_pickle.c: 0 done, -1 failed, 1 not one of theirs. */
int pv_op_const(pv_vm *vm, unsigned char op);
int pv_op_container(pv_vm *vm, unsigned char op);
int pv_op_memo(pv_vm *vm, unsigned char op);

#endif
