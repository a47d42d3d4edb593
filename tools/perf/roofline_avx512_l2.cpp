// roofline_avx512.cpp again, every software prefetch into L2 only (roofline_prefetch_l2.inl).
#define EMBEDRT_ROOFLINE_PREFETCH_L2 1
#include "roofline_avx512.cpp"
