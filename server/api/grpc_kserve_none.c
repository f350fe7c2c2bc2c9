/* grpc_kserve_none.c: KServe's gRPC methods in a build without gRPC
 * (GRPC=0): there are none (see grpc_kserve.c). */
#include "server/api/api.h"

const grpc_front_method *api_grpc_methods(int *n)
{
    *n = 0;
    return NULL;
}
