#include <rdma/providers/fi_prov.h>
