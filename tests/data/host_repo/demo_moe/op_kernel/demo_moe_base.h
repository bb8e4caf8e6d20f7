// Constants of the host-compilable demo operator (tests/test_apply_e2e.py).
#ifndef DEMO_MOE_BASE_H
#define DEMO_MOE_BASE_H

#include "kernel_operator.h"

constexpr uint32_t DEMO_GROUPS = 4;
constexpr uint32_t DEMO_TOKENS = 3;

#endif  // DEMO_MOE_BASE_H
