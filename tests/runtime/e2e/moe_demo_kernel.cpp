// A small instrumented kernel for the host end-to-end test (tests/runtime/test_host_e2e.py).
//
// Shaped like a fused MoE kernel: a setup phase, a per-expert loop on AIC (compute) and
// on AIV (wait + copy), then a combine; the last AIV core leaves early (an early return
// must still close `processing` and write the slot back). Trace points are integers, as
// `optrace preprocess --modify` leaves them (see point_map.json beside this file). The
// test substitutes the entry scaffold (codemods/templates/entry_scaffold.h) at the
// `// @@prologue` line, exactly as `optrace apply` inserts it — it brings the
// `processing` B/E points (TRACE_POINT, whose ids point_map.json lists) and the
// write-back — then compiles with g++ against the AscendC host stub and the runtime
// block template. Each core also writes one result into the output `y`, so a run
// without a profiling buffer can be shown to compute the same outputs.
//
// E2E_CORE_TYPE (compile-time, as the kernel's KERNEL_TASK_TYPE): 0 mixed (BLOCKS AIC +
// 2*BLOCKS AIV cores), 1 vector only (BLOCKS AIV cores), 2 cube only (BLOCKS AIC cores).
#include "ascendc_host_stub.h"
#include "moe_tracing_runtime.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#ifndef E2E_CORE_TYPE
#define E2E_CORE_TYPE 0
#endif
#ifndef E2E_EXPERTS
#define E2E_EXPERTS 4  // the overflow variant raises it past the slot capacity
#endif

using optrace_host::Spend;

extern "C" __global__ __aicore__ void moe_demo(GM_ADDR y, GM_ADDR profilingData)
{
    // @@prologue
    // this core's result: AIC core i at y[i], AIV core i at y[64 + i]
    __gm__ int64_t* result = reinterpret_cast<__gm__ int64_t*>(y) + AscendC::GetBlockIdx() + (ASCEND_IS_AIV ? 64 : 0);
    *result = 1 + AscendC::GetBlockIdx();
    MoeTracing(3);  // processing setup B
    Spend(100);
    MoeTracing(4);  // processing setup E
    if (ASCEND_IS_AIV && AscendC::GetBlockIdx() == 2 * AscendC::GetBlockNum() - 1) {
        return;  // nothing left for this core: the scaffold's guard still ends `processing`
    }
    if (ASCEND_IS_AIC) {
        for (int32_t e = 0; e < E2E_EXPERTS; ++e) {
            MoeTracing(5, 0, e);  // processing expert aic B, loop index
            Spend(50 + e);
            *result = *result * 3 + e;
            MoeTracing(6, 0, e);  // processing expert aic E
        }
    } else {
        int32_t role = static_cast<int32_t>(AscendC::GetSubBlockIdx());
        for (int32_t e = 0; e < E2E_EXPERTS; ++e) {
            MoeTracing(7, role, e);  // processing expert aiv B: extraId = sub-block
            MoeTracing(9);           // processing expert aiv wait B
            Spend(20);
            MoeTracing(10);          // processing expert aiv wait E
            Spend(30);
            *result = *result * 5 + e + role;
            MoeTracing(8, role, e);  // processing expert aiv E
        }
    }
    MoeTracing(11);  // processing combine B
    Spend(40);
    MoeTracing(12);  // processing combine E
}

// usage: moe_demo OUT.bin BLOCKS SLOTS START_CYCLE SKEW [null]
// Runs the simulated cores (E2E_CORE_TYPE) into a zeroed buffer of SLOTS slots, or with
// `null` passes the kernel no profiling buffer (the framework's untraced launch).
// Prints `dcci N`, `cycles N`, `barriers N` (stub counters) and `y` with the results.
int main(int argc, char** argv)
{
    if (argc != 6 && !(argc == 7 && std::string(argv[6]) == "null")) {
        std::fprintf(stderr, "usage: %s OUT.bin BLOCKS SLOTS START_CYCLE SKEW [null]\n", argv[0]);
        return 2;
    }
    const bool null_buffer = argc == 7;
    const int64_t blocks = std::strtoll(argv[2], nullptr, 10);
    const int64_t slots = std::strtoll(argv[3], nullptr, 10);
    const uint64_t start = std::strtoull(argv[4], nullptr, 10);
    const uint64_t skew = std::strtoull(argv[5], nullptr, 10);
    // Past the output, a sentinel region as large as every core could reach: a core
    // writing past the buffer (more cores than the bounds the kernel was built with) is
    // reported instead of corrupting the heap.
    const int64_t sentinel = 0x0BADC0DE;
    const int64_t spare = std::max<int64_t>(1, 3 * blocks - slots);
    std::vector<int64_t> gm(static_cast<size_t>(slots + spare) * PROF_SIZE_PER_CORE, 0);
    std::fill(gm.begin() + slots * PROF_SIZE_PER_CORE, gm.end(), sentinel);
    std::vector<int64_t> y(128, 0);
    const int64_t aic = E2E_CORE_TYPE == 1 ? 0 : blocks;
    const int64_t aiv = E2E_CORE_TYPE == 2 ? 0 : (E2E_CORE_TYPE == 1 ? blocks : 2 * blocks);
    optrace_host::RunCores(aic, aiv, start, skew, [&] {
        moe_demo(reinterpret_cast<GM_ADDR>(y.data()), null_buffer ? nullptr : reinterpret_cast<GM_ADDR>(gm.data()));
    });
    std::FILE* out = std::fopen(argv[1], "wb");
    if (out == nullptr) {
        std::perror(argv[1]);
        return 1;
    }
    const size_t words = static_cast<size_t>(slots) * PROF_SIZE_PER_CORE;
    size_t written = std::fwrite(gm.data(), sizeof(int64_t), words, out);
    std::fclose(out);
    std::printf("dcci %llu\n", static_cast<unsigned long long>(AscendC::g_dcciCount));
    std::printf("cycles %llu\n", static_cast<unsigned long long>(optrace_host::g_cycleReads));
    std::printf("barriers %llu\n", static_cast<unsigned long long>(optrace_host::g_barriers));
    std::printf("y");
    for (int64_t v : y) {
        std::printf(" %lld", static_cast<long long>(v));
    }
    std::printf("\n");
    for (size_t i = words; i < gm.size(); ++i) {
        if (gm[i] != sentinel) {
            std::fprintf(stderr, "a core wrote past the %lld slots of the buffer\n",
                         static_cast<long long>(slots));
            return 3;
        }
    }
    return written == words ? 0 : 1;
}
