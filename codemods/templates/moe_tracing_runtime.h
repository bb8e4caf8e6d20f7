// optrace-runtime-block v3
// MoeTracing device runtime, written whole by `optrace apply` beside the kernel entry and
// included from the operator's *_base.h; the same bytes for every operator at one version.
// Record layout: optrace docs/buffer-format.md. It keeps the legacy layout (readers of
// hand-instrumented kernels still work) and adds two things:
//   - a reserved first record per slot: point id 0, build fingerprint in the high word;
//   - an overflow guard: past capacity the counter keeps counting but nothing is written,
//     so a reader sees `counter - 1 - capacity` dropped records instead of garbage.
// A launch given no buffer (profiling_data == nullptr) records nothing: the entry
// scaffold leaves the per-core pointer null, and then no point reads the clock, waits
// on a barrier or writes (one binary serves traced and untraced runs).
#ifndef OPTRACE_RUNTIME_BLOCK_V3
#define OPTRACE_RUNTIME_BLOCK_V3

#ifndef ENABLE_MOE_PROFILING
#define ENABLE_MOE_PROFILING 1
#endif

// int64 words per core slot: [0] counter, events forward from [1], timestamps backward
// from [size-2], [size-1] the core's start cycle.
#ifndef PROF_SIZE_PER_CORE
#define PROF_SIZE_PER_CORE 2048
#endif
#define MOE_PROF_CAPACITY ((PROF_SIZE_PER_CORE - 2) / 2)

// Slots the host allocates in profiling_data: the same bounds, with the same defaults and
// the same -D overrides, as the op's profiling-sizes header (infer and the torch adapter).
// A core whose slot lies past them does not write back: its slot is missing from the
// trace instead of a write past the end of the buffer.
#ifndef OPTRACE_MAX_AIC_CORES
#define OPTRACE_MAX_AIC_CORES 32
#endif
#ifndef OPTRACE_MAX_AIV_CORES
#define OPTRACE_MAX_AIV_CORES 64
#endif

// The kernel's core mix (its KERNEL_TASK_TYPE declaration), passed by the entry scaffold to
// the write-back: it decides the slot layout, which `optrace preprocess` records in
// point_map.json ("cores") for the readers. A vector-only kernel has no AIC slots.
#define OPTRACE_CORES_MIXED 0     // AIC core i -> slot i, AIV core i -> slot GetBlockNum() + i
#define OPTRACE_CORES_AIV_ONLY 1  // AIV core i -> slot i, OPTRACE_MAX_AIV_CORES slots
#define OPTRACE_CORES_AIC_ONLY 2  // AIC core i -> slot i, OPTRACE_MAX_AIC_CORES slots

// Default of MoeTracing's `sync` parameter: a PIPE_ALL barrier before each record makes
// GetSystemCycle (scalar pipe) honest, at the cost of serialising the pipes.
#ifndef ENABLE_MOE_PROFILING_BARRIER
#define ENABLE_MOE_PROFILING_BARRIER true
#endif

// Set by `optrace preprocess --modify` (same value as "fingerprint" in point_map.json);
// 0 means "not preprocessed": readers cannot check that a map belongs to this build.
#ifndef OPTRACE_BUILD_FINGERPRINT
#define OPTRACE_BUILD_FINGERPRINT 0u
#endif

namespace optrace_detail {
// FNV-1a 32 over label, NUL, type, folded into 1..2^31-1: the id `optrace preprocess`
// assigns (barring a hash collision, which it reports), so unpreprocessed sources compile
// to the ids of the map. Same function as optrace.runtime.format.trace_point_hash.
constexpr uint32_t Fnv1a(const char* text, uint32_t hash)
{
    return *text ? Fnv1a(text + 1, (hash ^ static_cast<uint8_t>(*text)) * 16777619u) : hash;
}
constexpr uint32_t FoldId(uint32_t hash)
{
    return (hash & 0x7FFFFFFFu) != 0u ? (hash & 0x7FFFFFFFu) : 1u;
}
constexpr uint32_t TracePointHash(const char* label, const char* type)
{
    return FoldId(Fnv1a(type, (Fnv1a(label, 2166136261u) ^ 0u) * 16777619u));
}
// Forces compile-time evaluation: no hashing code ever reaches the device.
template <uint32_t V>
struct IdConstant {
    static constexpr uint32_t value = V;
};
}  // namespace optrace_detail

// Without preprocessing, TRACE_POINT still compiles to an integer (never a string).
#ifndef TRACE_POINT
#define TRACE_POINT(label, type) \
    (static_cast<int32_t>(::optrace_detail::IdConstant<::optrace_detail::TracePointHash(label, type)>::value))
#endif

#if ENABLE_MOE_PROFILING
// One pointer per core; split AIC / AIV compilation gets one per core type.
#if defined(SPLIT_CORE_CUBE)
__BLOCK_LOCAL__ __inline__ int64_t* g_moeProfilePtrCube;
#define MOE_PROFILE_PTR g_moeProfilePtrCube
#elif defined(SPLIT_CORE_VEC)
__BLOCK_LOCAL__ __inline__ int64_t* g_moeProfilePtrVec;
#define MOE_PROFILE_PTR g_moeProfilePtrVec
#else
__BLOCK_LOCAL__ __inline__ int64_t* g_moeProfilePtr;
#define MOE_PROFILE_PTR g_moeProfilePtr
#endif
#endif  // ENABLE_MOE_PROFILING

__aicore__ inline void SetMoeProfilePtr(int64_t* buffer)
{
#if ENABLE_MOE_PROFILING
    MOE_PROFILE_PTR = buffer;
#else
    (void)buffer;
#endif
}

namespace optrace_detail {
// A null pointer (no buffer this launch, or after the entry's write-back) is checked
// first: no barrier, no clock read, no write.
__aicore__ inline void WriteRecord(uint32_t pointId, uint32_t high, bool sync)
{
#if ENABLE_MOE_PROFILING
    int64_t* buffer = MOE_PROFILE_PTR;
    if (buffer == nullptr) {
        return;
    }
    if (sync) {
        AscendC::PipeBarrier<PIPE_ALL>();
    }
    int64_t n = buffer[0];
    // The guard: the legacy runtime wrote record 1024 over its own timestamps.
    if (n >= 1 && n <= MOE_PROF_CAPACITY) {
        buffer[n] = static_cast<int64_t>((static_cast<uint64_t>(high) << 32) | pointId);
        buffer[PROF_SIZE_PER_CORE - 1 - n] = static_cast<int64_t>(AscendC::GetSystemCycle());
    }
    buffer[0] = n + 1;
#else
    (void)pointId;
    (void)high;
    (void)sync;
#endif
}
}  // namespace optrace_detail

// Entry prologue: the launch's one look at profiling_data. With a buffer, the core's
// slot starts (counter 1, start cycle in the last word) and becomes the pointer every
// point writes through; without one, the pointer stays null and the slot is untouched.
// Returns the pointer set, for the write-back.
__aicore__ inline int64_t* OptraceEntryBegin(GM_ADDR profilingData, int64_t* buffer)
{
#if ENABLE_MOE_PROFILING
    if (profilingData == nullptr) {
        SetMoeProfilePtr(nullptr);
        return nullptr;
    }
    buffer[0] = 1;
    buffer[PROF_SIZE_PER_CORE - 1] = static_cast<int64_t>(AscendC::GetSystemCycle());
    SetMoeProfilePtr(buffer);
    return buffer;
#else
    (void)profilingData;
    (void)buffer;
    return nullptr;
#endif
}

// The reserved first record of a slot: call right after SetMoeProfilePtr.
__aicore__ inline void MoeTracingFingerprint()
{
    optrace_detail::WriteRecord(0u, static_cast<uint32_t>(OPTRACE_BUILD_FINGERPRINT), false);
}

template <bool sync = ENABLE_MOE_PROFILING_BARRIER>
__aicore__ inline void MoeTracing(int32_t id)
{
#if ENABLE_MOE_PROFILING
    optrace_detail::WriteRecord(static_cast<uint32_t>(id), 0u, sync);
#else
    (void)id;
#endif
}

// Legacy two-argument form: `index` lands in the high word as is, so decoders read it as
// extraId = index & 0xFF, index >> 8 (documented; optrace emits the three-argument form).
template <bool sync = ENABLE_MOE_PROFILING_BARRIER>
__aicore__ inline void MoeTracing(int32_t id, int32_t index)
{
#if ENABLE_MOE_PROFILING
    optrace_detail::WriteRecord(static_cast<uint32_t>(id), static_cast<uint32_t>(index), sync);
#else
    (void)id;
    (void)index;
#endif
}

// High word = extraId (8 bits) | index (24 bits) << 8.
template <bool sync = ENABLE_MOE_PROFILING_BARRIER>
__aicore__ inline void MoeTracing(int32_t id, int32_t extraId, int32_t index)
{
#if ENABLE_MOE_PROFILING
    optrace_detail::WriteRecord(static_cast<uint32_t>(id),
                                (static_cast<uint32_t>(extraId) & 0xFFu) | (static_cast<uint32_t>(index) << 8), sync);
#else
    (void)id;
    (void)extraId;
    (void)index;
#endif
}

// The end of a traced region, as a scope guard: `optrace apply` puts one right after each
// region's B point, so the E is recorded whenever the scope is left — the closing brace,
// every `return` (after the return value has been computed), `break` and `continue`.
#if ENABLE_MOE_PROFILING
struct OptraceEnd {
    __aicore__ inline explicit OptraceEnd(int32_t id) : id_(id), extraId_(0), index_(0), indexed_(false) {}
    __aicore__ inline OptraceEnd(int32_t id, int32_t extraId, int32_t index)
        : id_(id), extraId_(extraId), index_(index), indexed_(true)
    {
    }
    __aicore__ inline ~OptraceEnd()
    {
        if (indexed_) {
            MoeTracing(id_, extraId_, index_);
        } else {
            MoeTracing(id_);
        }
    }
    int32_t id_;
    int32_t extraId_;
    int32_t index_;
    bool indexed_;
};
#else
struct OptraceEnd {  // empty: profiling off compiles to nothing
    __aicore__ inline explicit OptraceEnd(int32_t) {}
    __aicore__ inline OptraceEnd(int32_t, int32_t, int32_t) {}
};
#endif

// Kernel-entry epilogue: copy this core's slot into the GM output `profiling_data`.
// Mixed kernels: AIC core i -> slot i, AIV core i -> slot GetBlockNum() + i; single-type
// kernels (`cores`, OPTRACE_CORES_*): core i -> slot i. A slot past the allocated ones
// is skipped. At most capacity records
// are copied (the counter is copied as is, so readers see drops), then every 64-byte
// cache line of the slot is flushed so the host reads what the scalar unit wrote.
__aicore__ inline void MoeProfileWriteBack(GM_ADDR profilingData, const int64_t* buffer,
                                           int32_t cores = OPTRACE_CORES_MIXED)
{
#if ENABLE_MOE_PROFILING
    if (profilingData == nullptr || buffer == nullptr) {
        return;
    }
    AscendC::PipeBarrier<PIPE_ALL>();
    int64_t slot = static_cast<int64_t>(AscendC::GetBlockIdx());
    int64_t slots = static_cast<int64_t>(OPTRACE_MAX_AIC_CORES) + OPTRACE_MAX_AIV_CORES;
    if (cores == OPTRACE_CORES_AIV_ONLY) {
        slots = OPTRACE_MAX_AIV_CORES;
    } else if (cores == OPTRACE_CORES_AIC_ONLY) {
        slots = OPTRACE_MAX_AIC_CORES;
    } else if (ASCEND_IS_AIV) {
        slot += static_cast<int64_t>(AscendC::GetBlockNum());
    }
    if (slot >= slots) {
        return;  // more cores than the host sized the buffer for (see above)
    }
    __gm__ int64_t* dst = reinterpret_cast<__gm__ int64_t*>(profilingData) + slot * PROF_SIZE_PER_CORE;
    int64_t counter = buffer[0];
    int64_t records = counter - 1;
    if (records < 0) {
        records = 0;
    }
    if (records > MOE_PROF_CAPACITY) {
        records = MOE_PROF_CAPACITY;
    }
    dst[0] = counter;
    for (int64_t i = 1; i <= records; ++i) {
        dst[i] = buffer[i];
    }
    for (int64_t i = PROF_SIZE_PER_CORE - 1 - records; i < PROF_SIZE_PER_CORE; ++i) {
        dst[i] = buffer[i];  // timestamps, then the start cycle in the last word
    }
    AscendC::GlobalTensor<int64_t> line;
    for (int64_t i = 0; i < PROF_SIZE_PER_CORE; i += 8) {  // 8 int64 = one 64-byte line
        line.SetGlobalBuffer(dst + i);
        AscendC::DataCacheCleanAndInvalid<int64_t, AscendC::CacheLine::SINGLE_CACHE_LINE,
                                          AscendC::DcciDst::CACHELINE_OUT>(line);
    }
#else
    (void)profilingData;
    (void)buffer;
    (void)cores;
#endif
}

// The kernel entry's scaffold (inserted by `optrace apply`) ends `processing` and writes
// the slot back through this guard, so every way out of the entry — the closing brace or
// an early `return` — records the E first and then copies the buffer to GM. `buffer` is
// what OptraceEntryBegin returned: null when the launch has no buffer, and then nothing
// is recorded or copied. (A v1 scaffold passes its stack buffer and no core mix: mixed.)
#if ENABLE_MOE_PROFILING
struct OptraceEntryEnd {
    __aicore__ inline OptraceEntryEnd(int32_t id, GM_ADDR out, int64_t* buffer, int32_t cores = OPTRACE_CORES_MIXED)
        : id_(id), cores_(cores), out_(out), buffer_(buffer)
    {
    }
    __aicore__ inline ~OptraceEntryEnd()
    {
        MoeTracing(id_);
        MoeProfileWriteBack(out_, buffer_, cores_);
        SetMoeProfilePtr(nullptr);
    }
    int32_t id_;
    int32_t cores_;
    GM_ADDR out_;
    int64_t* buffer_;
};
#endif

#endif  // OPTRACE_RUNTIME_BLOCK_V3
// optrace-runtime-block end
