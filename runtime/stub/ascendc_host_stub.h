// AscendC host stub: just enough of the AscendC kernel API for an instrumented kernel to
// compile AND run on the host with g++ (-std=c++17), one simulated core at a time.
//
// It exists to prove the device runtime block and the host decoder agree (the host
// end-to-end test) without an Ascend toolchain. It is not a simulator of the cores'
// pipes: barriers and cache maintenance are no-ops, GM is host memory.
//
// The harness (optrace_host namespace) sets, per simulated core, the core type, block
// index / count, sub-block index and the start of its system counter:
//   optrace_host::RunCores(aic, aiv, skew, [&] { my_kernel(args...); });
// GetSystemCycle() is deterministic: each call advances a per-core counter by
// `cycles_per_call`, and optrace_host::Spend(n) advances it by n (simulated work).
// Calls of GetSystemCycle and PipeBarrier are counted (g_cycleReads, g_barriers), so a
// test can show that a launch without a profiling buffer costs neither.
#ifndef OPTRACE_ASCENDC_HOST_STUB_H
#define OPTRACE_ASCENDC_HOST_STUB_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

// ---- qualifiers: nothing on the host ----
#define __aicore__
#define __global__
#if defined(__clang__) && !defined(OPTRACE_HOST_RUN)
// For libclang's compile check, global memory is its own address space, as on the device:
// a pointer that lost its `__gm__` (a parameter inserted between the qualifier and its
// type) is a type error here, not a silent match. g++ builds that run kernels on the host
// see plain pointers.
#define __gm__ __attribute__((address_space(1)))
#else
#define __gm__
#endif
#define __BLOCK_LOCAL__ thread_local
#define GM_ADDR __gm__ uint8_t*
#define KERNEL_TASK_TYPE_DEFAULT(x)
#define KERNEL_TASK_TYPE(key, x)

enum pipe_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL };

// The device's 16-bit element types (builtin there): storage only, for the compile check.
using half = uint16_t;
using bfloat16_t = uint16_t;

namespace AscendC {

constexpr int32_t AIC = 1;
constexpr int32_t AIV = 2;
constexpr int32_t MIX = 3;

enum class CacheLine { SINGLE_CACHE_LINE = 0, ENTIRE_DATA_CACHE };
enum class DcciDst { CACHELINE_ALL = 0, CACHELINE_UB, CACHELINE_OUT, CACHELINE_ATOMIC };

}  // namespace AscendC

namespace optrace_host {

// What the harness tells the kernel about the core it is "running on".
struct CoreContext {
    int32_t core_type = AscendC::AIV;
    int64_t block_idx = 0;
    int64_t block_num = 1;
    int64_t sub_block_idx = 0;
    uint64_t cycle = 0;            // current value of the system counter
    uint64_t cycles_per_call = 3;  // each GetSystemCycle() call costs this much
};

inline thread_local CoreContext g_core;
inline thread_local uint64_t g_cycleReads = 0;
inline thread_local uint64_t g_barriers = 0;

inline void Spend(uint64_t cycles) { g_core.cycle += cycles; }

// Runs `body` once per simulated core, sequentially: `aic` cube cores, then `aiv` vector
// cores. Core k (in that order) starts its counter at `start + k * skew`; uint64 wraps
// are allowed (start near 2**64 tests the decoder's wraparound handling).
inline void RunCores(int64_t aic, int64_t aiv, uint64_t start, uint64_t skew,
                     const std::function<void()>& body) {
    int64_t block_num = aic > 0 ? aic : aiv;
    int64_t k = 0;
    for (int64_t i = 0; i < aic; ++i, ++k) {
        g_core = CoreContext{AscendC::AIC, i, block_num, 0, start + static_cast<uint64_t>(k) * skew, 3};
        body();
    }
    for (int64_t i = 0; i < aiv; ++i, ++k) {
        // 1C2V: AIV core i belongs to block i / 2 as sub-block i % 2.
        g_core = CoreContext{AscendC::AIV, i, block_num, i % 2, start + static_cast<uint64_t>(k) * skew, 3};
        body();
    }
}

}  // namespace optrace_host

// Real AscendC has a per-compilation-pass core type; here it is per simulated core.
#define g_coreType (::optrace_host::g_core.core_type)
#define ASCEND_IS_AIC (g_coreType == ::AscendC::AIC)
#define ASCEND_IS_AIV (g_coreType == ::AscendC::AIV)

namespace AscendC {

inline int64_t GetBlockIdx() { return ::optrace_host::g_core.block_idx; }
inline int64_t GetBlockNum() { return ::optrace_host::g_core.block_num; }
inline int64_t GetSubBlockIdx() { return ::optrace_host::g_core.sub_block_idx; }
inline int64_t GetTaskRation() { return 2; }

inline int64_t GetSystemCycle() {
    ++::optrace_host::g_cycleReads;
    ::optrace_host::g_core.cycle += ::optrace_host::g_core.cycles_per_call;
    return static_cast<int64_t>(::optrace_host::g_core.cycle);
}

template <pipe_t pipe>
inline void PipeBarrier() {
    ++::optrace_host::g_barriers;
}

inline void SyncAll() {}

template <typename T>
class GlobalTensor {
public:
    void SetGlobalBuffer(__gm__ T* buffer, uint64_t size = 0) {
        address_ = buffer;
        size_ = size;
    }
    __gm__ T* GetPhyAddr() const { return address_; }
    T GetValue(uint64_t offset) const { return address_[offset]; }
    void SetValue(uint64_t offset, T value) { address_[offset] = value; }
    GlobalTensor operator[](uint64_t offset) const {
        GlobalTensor view;
        view.SetGlobalBuffer(address_ + offset, size_ > offset ? size_ - offset : 0);
        return view;
    }

private:
    __gm__ T* address_ = nullptr;
    uint64_t size_ = 0;
};

// ---- the API kernels call most, declared loosely for the compile check ----
// The check reads errors on optrace's lines only, but libclang reports every error of
// the operator's own code on the way: without these, a 6k-line operator gave 14,000
// (undeclared `LocalTensor`, `DataCopy`, ... and their cascades), which took a third of
// `check`. The calls compile whatever their arguments; nothing here runs on the host.
enum class TPosition { GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, LCM, SPM, SHM, TSCM, MAX };
using QuePosition = TPosition;
enum class RoundMode { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD };
enum class HardEvent { MTE2_V, V_MTE2, MTE3_V, V_MTE3, MTE2_MTE3, MTE3_MTE2, S_V, V_S, S_MTE2, MTE2_S,
                       S_MTE3, MTE3_S, M_V, V_M, MTE1_M, M_MTE1, MTE2_MTE1, MTE1_MTE2, FIX_M, M_FIX, MAX };

template <typename T>
class LocalTensor {
public:
    LocalTensor operator[](uint32_t offset) const {
        LocalTensor view = *this;
        view.address_ += offset;
        return view;
    }
    T GetValue(uint32_t offset) const { return address_[offset]; }
    void SetValue(uint32_t offset, T value) { address_[offset] = value; }
    uint32_t GetSize() const { return size_; }
    template <typename U>
    LocalTensor<U> ReinterpretCast() const { return LocalTensor<U>(); }

private:
    T* address_ = nullptr;
    uint32_t size_ = 0;
};

template <TPosition pos, int32_t depth = 1>
class TQue {
public:
    template <typename T>
    LocalTensor<T> AllocTensor() { return LocalTensor<T>(); }
    template <typename T>
    void FreeTensor(const LocalTensor<T>&) {}
    template <typename T>
    void EnQue(const LocalTensor<T>&) {}
    template <typename T>
    LocalTensor<T> DeQue() { return LocalTensor<T>(); }
};

template <TPosition pos>
class TBuf {
public:
    template <typename T>
    LocalTensor<T> Get() { return LocalTensor<T>(); }
    template <typename T>
    LocalTensor<T> Get(uint32_t) { return LocalTensor<T>(); }
};

class TPipe {
public:
    template <TPosition pos, int32_t depth>
    void InitBuffer(TQue<pos, depth>&, int32_t, uint32_t) {}
    template <TPosition pos>
    void InitBuffer(TBuf<pos>&, uint32_t) {}
    int32_t FetchEventID(HardEvent) { return 0; }
    void Destroy() {}
};

inline TPipe* GetTPipePtr() {
    static TPipe pipe;
    return &pipe;
}

template <HardEvent event>
inline void SetFlag(int32_t) {}
template <HardEvent event>
inline void WaitFlag(int32_t) {}

// Vector and data-movement calls: any arguments, explicit template arguments or not.
#define OPTRACE_STUB_ANY_CALL(name)            \
    template <typename... Ts, typename... Args> \
    inline void name(Args&&...) {}
OPTRACE_STUB_ANY_CALL(DataCopy)
OPTRACE_STUB_ANY_CALL(DataCopyPad)
OPTRACE_STUB_ANY_CALL(Duplicate)
OPTRACE_STUB_ANY_CALL(Add)
OPTRACE_STUB_ANY_CALL(Sub)
OPTRACE_STUB_ANY_CALL(Mul)
OPTRACE_STUB_ANY_CALL(Div)
OPTRACE_STUB_ANY_CALL(Max)
OPTRACE_STUB_ANY_CALL(Min)
OPTRACE_STUB_ANY_CALL(Adds)
OPTRACE_STUB_ANY_CALL(Muls)
OPTRACE_STUB_ANY_CALL(Maxs)
OPTRACE_STUB_ANY_CALL(Mins)
OPTRACE_STUB_ANY_CALL(Exp)
OPTRACE_STUB_ANY_CALL(Ln)
OPTRACE_STUB_ANY_CALL(Abs)
OPTRACE_STUB_ANY_CALL(Sqrt)
OPTRACE_STUB_ANY_CALL(Rsqrt)
OPTRACE_STUB_ANY_CALL(Reciprocal)
OPTRACE_STUB_ANY_CALL(Relu)
OPTRACE_STUB_ANY_CALL(Cast)
OPTRACE_STUB_ANY_CALL(Compare)
OPTRACE_STUB_ANY_CALL(Select)
OPTRACE_STUB_ANY_CALL(ReduceSum)
OPTRACE_STUB_ANY_CALL(ReduceMax)
OPTRACE_STUB_ANY_CALL(WholeReduceSum)
OPTRACE_STUB_ANY_CALL(WholeReduceMax)
OPTRACE_STUB_ANY_CALL(Gather)
OPTRACE_STUB_ANY_CALL(Brcb)
#undef OPTRACE_STUB_ANY_CALL

// The host has coherent memory: nothing to flush. Counted so tests can assert the
// write-back flushed what it wrote.
inline thread_local uint64_t g_dcciCount = 0;

template <typename T, CacheLine entire, DcciDst dst = DcciDst::CACHELINE_OUT>
inline void DataCacheCleanAndInvalid(const GlobalTensor<T>&) {
    ++g_dcciCount;
}

}  // namespace AscendC

#endif  // OPTRACE_ASCENDC_HOST_STUB_H
