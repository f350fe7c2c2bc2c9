/* grpc_none.c: the gRPC transport of a build without gRPC (GRPC=0, see the
 * Makefile): it says so when a config asks for it. */
#include "server/net/grpc.h"


bool grpc_front_available(void)
{
    return false;
}

mt_status grpc_front_bind(const grpc_front_options *o, grpc_front **out, mt_err *err)
{
    *out = NULL;
    return mt_fail(err, MT_EINVAL,
                   "server.grpc_listen: this build has no gRPC (rebuild after make deps, which "
                   "installs libgrpc-dev, libprotobuf-c-dev and protobuf-c-compiler)");
}

mt_status grpc_front_start(grpc_front *g, const grpc_front_options *o, mt_err *err)
{
    return mt_fail(err, MT_EINVAL, "this build has no gRPC");
}

int grpc_front_port(const grpc_front *g)
{
    return 0;
}

void grpc_front_quiesce(grpc_front *g)
{
}

void grpc_front_detach(grpc_front *g)
{
}

void grpc_front_stop(grpc_front *g)
{
}
