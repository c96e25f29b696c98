// librdkafka >= 2.3, found through pkg-config (`rdkafka`). Only Shared/IsletKafka/RDKafka/ may import this module.
#ifndef ISLET_CRDKAFKA_SHIM_H
#define ISLET_CRDKAFKA_SHIM_H

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#if RD_KAFKA_VERSION < 0x020300ff
#error "Islet needs librdkafka 2.3 or newer: run scripts/bootstrap.sh"
#endif

#endif
