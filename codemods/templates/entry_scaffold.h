// optrace-entry-scaffold v2
// Snippet file (not a header to #include): the lines `optrace apply` (codemods/
// kernel_entry.py) inserts right after the `{` of the kernel entry
// (`extern "C" __global__ __aicore__ void op(GM_ADDR ..., GM_ADDR profiling_data, ...)`).
// The section runs from `// @@prologue` to `// @@end`; `@PROFILING_ARG@` stands for the
// entry's GM_ADDR parameter of the `profiling_data` output (the last output, gate G2),
// `@CORES@` for the kernel's core mix from its KERNEL_TASK_TYPE declaration
// (OPTRACE_CORES_MIXED, _AIV_ONLY or _AIC_ONLY; mixed when the kernel declares none).
// `optrace apply` (codemods/kernel_entry.py) inserts exactly these lines, and
// tests/runtime/test_host_e2e.py compiles and runs a kernel built with them.
//
// What it does, per core (the pointer is block-local, so each core has its own):
//   - OptraceEntryBegin reads profiling_data once: null (the framework passed no buffer)
//     leaves the pointer null, so nothing below reads the clock or writes — one binary
//     serves traced and untraced runs; else a stack buffer of PROF_SIZE_PER_CORE int64,
//     counter = 1, start cycle in the last word, set as the per-core pointer;
//   - the reserved fingerprint record as record 0;
//   - the `processing` B point;
//   - a scope guard (OptraceEntryEnd, runtime block) whose destructor runs on every way
//     out of the entry — closing brace or early `return` — and records the `processing`
//     E, then MoeProfileWriteBack: AIC core i -> slot i, AIV core i -> slot
//     GetBlockNum() + i (a single-type kernel: core i -> slot i), at most capacity
//     records, DataCacheCleanAndInvalid per 64-byte line, and finally clears the
//     pointer so no record targets a dead frame.
// With ENABLE_MOE_PROFILING 0 only `(void)profiling_data;` remains: the output stays in
// the signature (zeros mean "off").
//
// Mixed (1C2V) kernels whose AIC and AIV must share a time origin can put a cross-core
// flag handshake before the prologue's GetSystemCycle; that is op-specific and not
// inserted automatically.
// @@prologue
// optrace-scaffold begin
#if ENABLE_MOE_PROFILING
    int64_t moeProfBuf[PROF_SIZE_PER_CORE];
    int64_t* moeProfPtr = OptraceEntryBegin(@PROFILING_ARG@, moeProfBuf);
    MoeTracingFingerprint();
    MoeTracing(TRACE_POINT("processing", "B"));
    OptraceEntryEnd optraceEntryEnd(TRACE_POINT("processing", "E"), @PROFILING_ARG@, moeProfPtr, @CORES@);
#else
    (void)@PROFILING_ARG@;
#endif
// optrace-scaffold end
// @@end
