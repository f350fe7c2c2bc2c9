/* calib_text.h: a small built-in English text set for activation
 * calibration (the activation smoothing of INT8 variants). Written for this
 * purpose, not taken from any benchmark: STS-B, which the precision report
 * measures on, is deliberately not used to calibrate. */
#ifndef MT_CALIB_TEXT_H
#define MT_CALIB_TEXT_H

extern const char *const mt_calib_sentences[];
extern const int mt_calib_sentences_n;

#endif
