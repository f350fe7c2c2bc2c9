/* engine/cuda/entry_points.h: the one list of the CUDA backend's entry
 * points (what engine/cuda/backend.h declares and engine/cuda/backend.c
 * defines), as an X-macro. Three files expand it:
 *
 *   engine/cuda/backend.h  the declarations
 *   engine/cuda/dl.c       the module's table (dlsym by name) and the
 *                          forwarders the mantissa binary links
 *   engine/cuda/none.c     the answers of a build without CUDA
 *
 * so an entry point is added by one row here and its definition in the
 * module; dl.c and none.c follow at compile time.
 *
 * Rows: F(ret, name, (params), (args), answer) for a function returning a
 * value, V(name, (params), (args), answer) for one returning nothing.
 * answer is what the function does where there is no CUDA backend (no
 * module, no driver, or a build without CUDA): an expression of type ret
 * (a statement for V) in the parameters and `why`, a string saying why
 * there is no CUDA. The helpers it calls (cuda_no_*) are in
 * engine/cuda/no_cuda.h.
 *
 * What each does is written in engine/cuda/backend.h. */
#ifndef MT_CUDA_ENTRY_POINTS_H
#define MT_CUDA_ENTRY_POINTS_H

#define MT_CUDA_ENTRY_POINTS(F, V)                                                                 \
    F(int, mt_cuda_device_count, (void), (), 0)                                                    \
    F(mt_status, mt_cuda_describe, (int dev, char *buf, size_t cap), (dev, buf, cap),              \
      cuda_no_describe(why, buf, cap))                                                             \
    F(mt_status, mt_backend_cuda_create, (int device, mt_backend **out, mt_err *err),              \
      (device, out, err), cuda_no_backend(why, out, err))                                          \
    V(mt_cuda_opts_default, (mt_cuda_opts * o), (o), cuda_no_opts(o))                              \
    F(mt_status, mt_backend_cuda_create_opts,                                                      \
      (int device, const mt_cuda_opts *o, mt_backend **out, mt_err *err), (device, o, out, err),   \
      cuda_no_backend(why, out, err))                                                              \
    F(mt_status, mt_cuda_graph_begin,                                                              \
      (mt_backend * be, unsigned long long key, bool *replay, mt_err *err),                        \
      (be, key, replay, err), mt_fail(err, MT_EUNSUPPORTED, "%s", why))                            \
    F(mt_status, mt_cuda_graph_end, (mt_backend * be, mt_err *err), (be, err),                     \
      mt_fail(err, MT_EUNSUPPORTED, "%s", why))                                                    \
    V(mt_cuda_get_counts, (const mt_backend *be, mt_cuda_counts *out), (be, out),                  \
      memset(out, 0, sizeof *out))                                                                 \
    F(bool, mt_cuda_fp8_w8a8_enabled, (const mt_backend *be), (be), false)                         \
    F(int, mt_cuda_weight_crossover, (const mt_weight *w), (w), -1)                                \
    F(int, mt_cuda_weight_path, (const mt_weight *w, int m), (w, m), -1)

#endif
