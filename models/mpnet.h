/* mpnet.h: what the MPNet row (models/mpnet.c) shows beyond its enc_arch:
 * its relative position bucketing, which tests/unit/test_mpnet.c checks
 * against transformers' own function. */
#ifndef MT_MODELS_MPNET_H
#define MT_MODELS_MPNET_H

#define MPNET_BUCKETS 32 /* relative_attention_num_buckets, the only value served */

/* transformers' MPNet relative_position_bucket (bidirectional; relative =
 * key position - query position). */
int mpnet_bucket(int rel, int buckets, int max_distance);

#endif
