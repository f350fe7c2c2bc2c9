/* probe_text.h: the built-in probe texts of the load check: every build
 * whose GEMMs are not all FP32 embeds them, and its vectors are compared
 * with FP32's before it may serve (engine/model.h mt_drift_check). */
#ifndef MT_PROBE_TEXT_H
#define MT_PROBE_TEXT_H

extern const char *const mt_probe_texts[];
extern const int mt_probe_texts_n;

#endif
