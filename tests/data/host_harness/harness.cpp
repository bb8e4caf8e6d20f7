// Runs the demo operator's kernel (tests/data/host_repo) on the host: 2 AIC + 4 AIV
// simulated cores, then writes the profiling_data buffer (int64, slots x words) to argv[1].
// Compiled with -include ascendc_host_stub.h and -I pointing at the (instrumented) kernel.
#include <cstdio>
#include <vector>

#include "demo_moe.cpp"

int main(int argc, char** argv)
{
    const int64_t aic = 2;
    const int64_t aiv = 4;
    std::vector<int64_t> profiling((aic + aiv) * PROF_SIZE_PER_CORE, 0);
    std::vector<uint8_t> x(16), out(16), workspace(64), tiling(16);
    optrace_host::RunCores(aic, aiv, 1000000, 250, [&] {
        demo_moe(x.data(), out.data(), reinterpret_cast<GM_ADDR>(profiling.data()), workspace.data(),
                 tiling.data());
    });
    FILE* f = std::fopen(argv[argc - 1], "wb");
    std::fwrite(profiling.data(), sizeof(int64_t), profiling.size(), f);
    std::fclose(f);
    return 0;
}
