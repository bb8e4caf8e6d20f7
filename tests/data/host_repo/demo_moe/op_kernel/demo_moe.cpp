// A small mixed-core MoE-shaped kernel that compiles and runs on the host against the
// AscendC host stub: the subject of optrace's apply -> preprocess -> compile -> run ->
// collect test, and of the zero-cost test (profiling compiled out = the same code).
#include "demo_moe_base.h"

// Functions stay out of line so each one's code can be compared on its own.
#define DEMO_FN __aicore__ __attribute__((noinline))

class DemoMoe {
public:
    DEMO_FN void Init(GM_ADDR x, GM_ADDR out, GM_ADDR workspace)
    {
        x_ = x;
        out_ = out;
        workspace_ = workspace;
    }

    DEMO_FN void Process()
    {
        if (ASCEND_IS_AIC) {
            ComputeGroups();
        } else {
            DispatchTokens();
            AscendC::SyncAll();
            CombineTokens();
        }
    }

    DEMO_FN uint32_t WaitGroupReady(uint32_t groupIdx)
    {
        uint32_t polls = 0;
        for (uint32_t k = 0; k < 4; ++k) {
            optrace_host::Spend(5);
            ++polls;
        }
        if (groupIdx == DEMO_GROUPS) {
            return 0;  // never taken: an early return the scope guard must close
        }
        return polls + groupIdx;
    }

    DEMO_FN void ComputeGroups()
    {
        for (uint32_t groupIdx = 0; groupIdx < DEMO_GROUPS; ++groupIdx) {
            acc_ += WaitGroupReady(groupIdx);
            for (uint32_t kIdx = 0; kIdx < 8; ++kIdx) {
                optrace_host::Spend(10 + kIdx);
                acc_ += kIdx;
            }
            AscendC::SyncAll();
        }
    }

    DEMO_FN void DispatchTokens()
    {
        for (uint32_t tokenIdx = 0; tokenIdx < DEMO_TOKENS; ++tokenIdx) {
            SendToken(tokenIdx);
            AscendC::SyncAll();
        }
    }

    DEMO_FN void SendToken(uint32_t tokenIdx)
    {
        for (uint32_t i = 0; i < 6; ++i) {
            optrace_host::Spend(7);
            acc_ += i * tokenIdx;
        }
        if (tokenIdx == 1 && AscendC::GetSubBlockIdx() == 1) {
            return;  // this role skips the rest for token 1
        }
        optrace_host::Spend(3);
        acc_ += 1;
        acc_ += 2;
    }

    DEMO_FN void CombineTokens()
    {
        for (uint32_t tileIdx = 0; tileIdx < 5; ++tileIdx) {
            optrace_host::Spend(4);
            acc_ ^= tileIdx;
        }
        AscendC::SyncAll();
        if (out_ != nullptr) {
            out_[0] = static_cast<uint8_t>(acc_);
        }
    }

private:
    GM_ADDR x_ = nullptr;
    GM_ADDR out_ = nullptr;
    GM_ADDR workspace_ = nullptr;
    uint64_t acc_ = 0;
};

extern "C" __global__ __aicore__ void demo_moe(GM_ADDR x, GM_ADDR out, GM_ADDR workspace, GM_ADDR tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    (void)tiling;
    DemoMoe op;
    op.Init(x, out, workspace);
    op.Process();
}
