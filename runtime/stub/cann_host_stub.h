// CANN host-side stub: the names optrace's own host-layer insertions use (OpDef outputs,
// infer shape / dtype, tiling, aclnn), declared just enough for libclang to type-check
// those lines when the real CANN headers are absent. It is force-included before every
// op_host / op_api file of a host compile (engine/host_compile.py); kernel files get the
// AscendC stub instead. It does not try to be CANN: a real header that is present wins
// where it declares the same names (the redefinition is the same before and after apply).
#ifndef OPTRACE_CANN_HOST_STUB_H
#define OPTRACE_CANN_HOST_STUB_H

#include <cstdint>  // CANN's headers bring the fixed-width types every op_host file uses
// CANN's OpParamDef also takes std::vector lists (`DataType(dtypes.find(soc)->second)`):
// optrace writes profiling_data's list as a vector of the template output's length.
#if __has_include(<vector>)
#include <vector>
#define OPTRACE_STUB_HAS_VECTOR 1
#endif

namespace ge {
using graphStatus = unsigned int;
constexpr graphStatus GRAPH_SUCCESS = 0;
constexpr graphStatus GRAPH_FAILED = 0xFFFFFFFFu;
enum DataType {
    DT_FLOAT = 0, DT_FLOAT16 = 1, DT_INT8 = 2, DT_INT32 = 3, DT_UINT8 = 4, DT_INT16 = 6,
    DT_UINT16 = 7, DT_UINT32 = 8, DT_INT64 = 9, DT_UINT64 = 10, DT_DOUBLE = 11, DT_BOOL = 12,
    DT_BF16 = 27
};
enum Format { FORMAT_NCHW = 0, FORMAT_NHWC = 1, FORMAT_ND = 2, FORMAT_NC1HWC0 = 3, FORMAT_FRACTAL_NZ = 29 };
}  // namespace ge

namespace gert {
class Shape {
public:
    void SetDimNum(unsigned long n);
    void SetDim(unsigned long i, long v);
    unsigned long GetDimNum() const;
    long GetDim(unsigned long i) const;
};
class CompileTimeTensorDesc {
public:
    ge::DataType GetDataType() const;
};
class InferShapeContext {
public:
    Shape *GetOutputShape(unsigned long i);
    const Shape *GetInputShape(unsigned long i);
};
class InferDataTypeContext {
public:
    ge::graphStatus SetOutputDataType(unsigned long i, ge::DataType t);
    ge::DataType GetInputDataType(unsigned long i);
};
class TilingContext {
public:
    const CompileTimeTensorDesc *GetOutputDesc(unsigned long i);
};
// `IMPL_OP_INFERSHAPE(Op).InferShape(f).InferDataType(g);` at namespace scope: a builder
// whose setters keep the last function given (optrace wraps a library infer this way).
class OpImplRegisterV2 {
public:
    explicit OpImplRegisterV2(const char *op_type);
    OpImplRegisterV2 &InferShape(ge::graphStatus (*fn)(InferShapeContext *));
    OpImplRegisterV2 &InferDataType(ge::graphStatus (*fn)(InferDataTypeContext *));
    OpImplRegisterV2 &Tiling(ge::graphStatus (*fn)(TilingContext *));
    template <typename... A> OpImplRegisterV2 &TilingParse(A...);
    template <typename... A> OpImplRegisterV2 &InferShapeRange(A...);
};
}  // namespace gert
#ifndef IMPL_OP_INFERSHAPE
#define OPTRACE_STUB_CAT(a, b) a##b
#define IMPL_OP_INFERSHAPE(op) \
    static gert::OpImplRegisterV2 OPTRACE_STUB_CAT(optrace_stub_infer_, op) = gert::OpImplRegisterV2(#op)
#define IMPL_OP_OPTILING(op) \
    static gert::OpImplRegisterV2 OPTRACE_STUB_CAT(optrace_stub_tiling_, op) = gert::OpImplRegisterV2(#op)
#define IMPL_OP(op) static gert::OpImplRegisterV2 OPTRACE_STUB_CAT(optrace_stub_impl_, op) = gert::OpImplRegisterV2(#op)
#endif

namespace ops {
enum Option { OPTIONAL = 0, REQUIRED = 1, DYNAMIC = 2 };
class OpParamDef {
public:
    OpParamDef &ParamType(Option o);
    template <int N> OpParamDef &DataType(const ge::DataType (&types)[N]);
    template <int N> OpParamDef &DataTypeList(const ge::DataType (&types)[N]);
    template <int N> OpParamDef &Format(const ge::Format (&formats)[N]);
    template <int N> OpParamDef &FormatList(const ge::Format (&formats)[N]);
    template <int N> OpParamDef &UnknownShapeFormat(const ge::Format (&formats)[N]);
#ifdef OPTRACE_STUB_HAS_VECTOR
    OpParamDef &DataType(const std::vector<ge::DataType> &types);
    OpParamDef &DataTypeList(const std::vector<ge::DataType> &types);
    OpParamDef &Format(const std::vector<ge::Format> &formats);
    OpParamDef &FormatList(const std::vector<ge::Format> &formats);
    OpParamDef &UnknownShapeFormat(const std::vector<ge::Format> &formats);
#endif
    OpParamDef &AutoContiguous();
    OpParamDef &IgnoreContiguous();
};
class OpAICoreConfig {
public:
    OpParamDef &Input(const char *name);
    OpParamDef &Output(const char *name);
};
class OpDef {
public:
    explicit OpDef(const char *name);
    OpParamDef &Input(const char *name);
    OpParamDef &Output(const char *name);
};
}  // namespace ops

struct aclTensor;
struct aclOpExecutor;

// The l0 launch (opdev, op_api/): `ADD_TO_LAUNCHER_LIST_AICORE(Op, OP_INPUT(a, b),
// OP_OUTPUT(y), OP_ATTR(k))`. Each list becomes a call taking its items, so an item that
// names nothing in scope (a `profilingData` not threaded down to the launch) is an error
// on its line, as the real macros make it.
namespace optrace_stub {
template <typename... Items>
inline int LaunchList(const Items &...) { return 0; }
}  // namespace optrace_stub
#define OP_TYPE_REGISTER(op) static const char *const OPTRACE_STUB_CAT(optrace_stub_op_type_, op) = #op
#define OP_INPUT(...) ::optrace_stub::LaunchList(__VA_ARGS__)
#define OP_OUTPUT(...) ::optrace_stub::LaunchList(__VA_ARGS__)
#define OP_ATTR(...) ::optrace_stub::LaunchList(__VA_ARGS__)
#define OP_WORKSPACE(...) ::optrace_stub::LaunchList(__VA_ARGS__)
#define OP_OPTION(...) ::optrace_stub::LaunchList(__VA_ARGS__)
#define OP_EMPTY_ARG ::optrace_stub::LaunchList()
#define ADD_TO_LAUNCHER_LIST_AICORE(op, ...) ::optrace_stub::LaunchList(__VA_ARGS__)

#endif  // OPTRACE_CANN_HOST_STUB_H
