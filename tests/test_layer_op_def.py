"""OpDef codemod: profiling_data after the last output, lists as long as the others."""

# ruff: noqa: E501  (inline before / after snippets are verbatim code)

from __future__ import annotations

from pathlib import Path

import pytest
from layer_snippets import dedent, make_repo, run

from optrace.codemods.op_def import op_def_edits, parse_opdef
from optrace.engine.diagnostics import InputError
from optrace.engine.host_compile import host_compile

OPDEF = "ops/demo_op/op_host/demo_op_def.cpp"

BEFORE = """\
namespace ops {
class DemoOp : public OpDef {
public:
    explicit DemoOp(const char *name) : OpDef(name)
    {
        this->Input("x")
            .ParamType(REQUIRED)
            .DataType({ge::DT_BF16, ge::DT_FLOAT16})
            .Format({ge::FORMAT_ND, ge::FORMAT_ND});
        this->Output("y")
            .ParamType(REQUIRED)
            .DataType({ge::DT_BF16, ge::DT_FLOAT16})
            .Format({ge::FORMAT_FRACTAL_NZ, ge::FORMAT_ND})
            .UnknownShapeFormat({ge::FORMAT_ND, ge::FORMAT_ND})
            .AutoContiguous()
            .InitValue(0);
        this->Attr("k").Int();
    }
};
OP_ADD(DemoOp);
}  // namespace ops
"""

AFTER_B = BEFORE.replace("""            .InitValue(0);
""", """            .InitValue(0);
        this->Output("profiling_data")  // optrace
            .ParamType(REQUIRED)  // optrace
            .DataType({ge::DT_INT64, ge::DT_INT64})  // optrace
            .Format({ge::FORMAT_ND, ge::FORMAT_ND})  // optrace
            .UnknownShapeFormat({ge::FORMAT_ND, ge::FORMAT_ND})  // optrace
            .AutoContiguous();  // optrace
""")


def test_profiling_data_follows_the_last_output(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {OPDEF: BEFORE})
    assert run(op_def_edits, op, "B") == {OPDEF: AFTER_B}


def test_mode_a_makes_it_optional(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {OPDEF: BEFORE})
    assert run(op_def_edits, op, "A")[OPDEF] == AFTER_B.replace(
        ".ParamType(REQUIRED)  // optrace", ".ParamType(OPTIONAL)  // optrace")


def test_one_line_outputs_and_missing_param_type(tmp_path: Path) -> None:
    before = dedent("""\
        class DemoOp : public OpDef {
            DemoOp(const char *name) : OpDef(name) {
                this->Output("y").DataType({DT_FLOAT, DT_FLOAT, DT_INT32}).Format({FORMAT_ND, FORMAT_NZ, FORMAT_ND});
            }
        };
        """)
    op = make_repo(tmp_path, {OPDEF: before})
    after = run(op_def_edits, op, "A")[OPDEF]
    # past 120 columns as one line: the brace list goes on a continuation line
    assert ('        this->Output("profiling_data").ParamType(OPTIONAL).DataType({  // optrace\n'
            '            DT_INT64, DT_INT64, DT_INT64}).Format({FORMAT_ND, FORMAT_ND, FORMAT_ND});  // optrace\n') in after


def test_hand_written_profiling_output_is_left_alone(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {OPDEF: BEFORE.replace('this->Output("y")', 'this->Output("profiling_data")')})
    assert run(op_def_edits, op, "B") == {}


def test_outputs_that_cannot_be_located_are_bad_input(tmp_path: Path) -> None:
    before = dedent("""\
        class DemoOp : public OpDef {
            DemoOp(const char *name) : OpDef(name) {
                this->Input("x").DataType({DT_FLOAT});
                this->Output(OutputName()).DataType({DT_FLOAT});
            }
        };
        """)
    op = make_repo(tmp_path, {OPDEF: before})
    with pytest.raises(InputError) as caught:
        run(op_def_edits, op, "B")
    assert caught.value.diagnostic.code == "OT310"
    assert caught.value.diagnostic.line == 4


LOOPED = """\
namespace ops {
class DemoOp : public OpDef {
public:
    explicit DemoOp(const char *name) : OpDef(name)
    {
        this->Input("x").ParamType(REQUIRED).DataType({ge::DT_FLOAT}).Format({ge::FORMAT_ND});
        static const char *kOutputs[] = {"y", "mean"};
        for (auto n : kOutputs) {
            this->Output(n)
                .ParamType(REQUIRED)
                .DataType({ge::DT_FLOAT})
                .Format({ge::FORMAT_ND});
        }
        this->AICore().AddConfig("ascend910b");
    }
};
OP_ADD(DemoOp);
}  // namespace ops
"""


def test_outputs_declared_in_a_loop_over_names_get_profiling_data_after_the_loop(tmp_path: Path) -> None:
    """`for (auto n : kOutputs) { this->Output(n)...; }` over a list of string literals:
    the outputs are the list's names in order, and profiling_data goes after the loop,
    once, at the loop's indent (it was OT310: "does not name the output with a string
    literal"). A loop over anything else stays OT310 (the test above)."""
    op = make_repo(tmp_path, {OPDEF: LOOPED})
    after = run(op_def_edits, op, "B")[OPDEF]
    assert after == LOOPED.replace("""                .Format({ge::FORMAT_ND});
        }
""", """                .Format({ge::FORMAT_ND});
        }
        this->Output("profiling_data")  // optrace
            .ParamType(REQUIRED)  // optrace
            .DataType({ge::DT_INT64})  // optrace
            .Format({ge::FORMAT_ND});  // optrace
""")
    info = parse_opdef(op / "op_host" / "demo_op_def.cpp", after.encode(), "DemoOp")
    assert [o.name for o in info.outputs] == ["y", "mean", "profiling_data"]


HELPER = """\
namespace ops {
class DemoOp : public OpDef {
public:
    explicit DemoOp(const char *name) : OpDef(name)
    {
        auto addOutput = [this](const char *n) -> void {
            this->Output(n)
                .ParamType(REQUIRED)
                .DataType({ge::DT_FLOAT, ge::DT_FLOAT16})
                .Format({ge::FORMAT_ND, ge::FORMAT_ND});
        };
        this->Input("x").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_FLOAT16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
        addOutput("y");
        addOutput("state");
        this->Attr("lr").Float();
    }
};
OP_ADD(DemoOp);
}  // namespace ops
"""


def test_outputs_declared_by_a_helper_lambda_get_profiling_data_after_its_last_call(tmp_path: Path) -> None:
    """`auto addOutput = [this](const char *n) { this->Output(n)...; };` called with
    literals: the outputs are the calls' names, and profiling_data goes after the last
    call, as a copy of the helper's statement at the call's indent (it was OT310)."""
    op = make_repo(tmp_path, {OPDEF: HELPER})
    after = run(op_def_edits, op, "B")[OPDEF]
    assert after == HELPER.replace("""        addOutput("state");
""", """        addOutput("state");
        this->Output("profiling_data")  // optrace
            .ParamType(REQUIRED)  // optrace
            .DataType({ge::DT_INT64, ge::DT_INT64})  // optrace
            .Format({ge::FORMAT_ND, ge::FORMAT_ND});  // optrace
""")
    info = parse_opdef(op / "op_host" / "demo_op_def.cpp", after.encode(), "DemoOp")
    assert [o.name for o in info.outputs] == ["y", "state", "profiling_data"]


NO_OUTPUTS = """\
namespace ops {
class DemoOp : public OpDef {
public:
    explicit DemoOp(const char *name) : OpDef(name)
    {
        this->Input("x")
            .ParamType(REQUIRED)
            .DataType({ge::DT_FLOAT, ge::DT_BF16})
            .Format({ge::FORMAT_ND, ge::FORMAT_ND})
            .ValueDepend(OPTIONAL);
        this->Input("flags").ParamType(OPTIONAL).DataType({ge::DT_INT32, ge::DT_INT32}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
        this->Attr("k").Int();
        this->AICore().AddConfig("ascend910b");
    }
};
OP_ADD(DemoOp);
}  // namespace ops
"""


def test_an_opdef_without_outputs_gets_profiling_data_as_its_only_output(tmp_path: Path) -> None:
    # Written like the last input (its list lengths), right after the inputs.
    op = make_repo(tmp_path, {OPDEF: NO_OUTPUTS})
    added = ('        this->Output("profiling_data").ParamType(REQUIRED).DataType({  // optrace\n'
             '            ge::DT_INT64, ge::DT_INT64}).Format({ge::FORMAT_ND, ge::FORMAT_ND});  // optrace\n')
    after = NO_OUTPUTS.replace('        this->Attr("k")', added + '        this->Attr("k")')
    assert run(op_def_edits, op, "B") == {OPDEF: after}
    assert run(op_def_edits, op, "A") == {OPDEF: after.replace("ParamType(REQUIRED).DataType({",
                                                               "ParamType(OPTIONAL).DataType({")}


def test_an_opdef_without_inputs_or_outputs_gets_one_before_its_configuration(tmp_path: Path) -> None:
    before = dedent("""\
        class DemoOp : public OpDef {
            DemoOp(const char *name) : OpDef(name) {
                this->Attr("k").Int();
                this->AICore().AddConfig("ascend910b");
            }
        };
        """)
    op = make_repo(tmp_path, {OPDEF: before})
    assert run(op_def_edits, op, "B") == {OPDEF: before.replace(
        '        this->Attr("k")',
        '        this->Output("profiling_data").ParamType(REQUIRED).DataType({ge::DT_INT64})'
        '.Format({ge::FORMAT_ND})  // optrace\n'  # past 120 columns: the chain goes on below
        '                .UnknownShapeFormat({ge::FORMAT_ND});  // optrace\n        this->Attr("k")')}


def test_an_opdef_with_nothing_to_anchor_on_is_bad_input(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {OPDEF: 'void f() {\n    this->Input(kName);\n}\nclass Other : public OpDef {};\n'})
    with pytest.raises(InputError) as caught:
        run(op_def_edits, op, "B")
    assert caught.value.diagnostic.code == "OT310" and "cannot locate the OpDef's outputs" in str(caught.value)


CONFIGS = """\
namespace ops {
class DemoOp : public OpDef {
public:
    explicit DemoOp(const char *name) : OpDef(name)
    {
        this->Attr("k").Int();
        OpAICoreConfig cfgA;
        cfgA.Input("x").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_FLOAT16});
        cfgA.Output("y").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_FLOAT16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
        cfgA.Output("n").ParamType(REQUIRED).DataType(kCountTypes.find(soc)->second);
        this->AICore().AddConfig("soc_a", cfgA);
        OpAICoreConfig cfgB;
        cfgB.Input("x").ParamType(REQUIRED).DataType({ge::DT_FLOAT});
        cfgB.Output("y").ParamType(REQUIRED).DataType({ge::DT_FLOAT}).Format({ge::FORMAT_ND});
        cfgB.Output("n").ParamType(REQUIRED).DataType({ge::DT_INT32});
        this->AICore().AddConfig("soc_b", cfgB);
    }
};
}  // namespace ops
"""


def test_outputs_declared_on_per_soc_configs_get_profiling_data_in_each(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {OPDEF: CONFIGS})
    after = run(op_def_edits, op)[OPDEF]  # strips back (run checks it)
    assert after == CONFIGS.replace(
        "        this->AICore().AddConfig(\"soc_a\", cfgA);\n",
        '        cfgA.Output("profiling_data").ParamType(REQUIRED)  // optrace\n'
        "                .DataType(std::vector<ge::DataType>((kCountTypes.find(soc)->second).size(), ge::DT_INT64));"
        "  // optrace\n"
        '        this->AICore().AddConfig("soc_a", cfgA);\n').replace(
        "        this->AICore().AddConfig(\"soc_b\", cfgB);\n",
        '        cfgB.Output("profiling_data").ParamType(REQUIRED).DataType({ge::DT_INT64});  // optrace\n'
        '        this->AICore().AddConfig("soc_b", cfgB);\n')
    # no `this->Output` was invented: the configs' outputs are the op's
    assert 'this->Output("profiling_data")' not in after


def test_a_vector_list_compiles_against_the_host_stub(tmp_path: Path) -> None:
    text = ("#include <vector>\n#include \"register/op_def_registry.h\"\n"
            "static const std::vector<ge::DataType> dtypes = {ge::DT_FLOAT, ge::DT_FLOAT16};\n"
            "namespace ops {\nclass DemoOp : public OpDef {\npublic:\n"
            "    explicit DemoOp(const char *name) : OpDef(name)\n    {\n"
            '        this->Output("y").ParamType(REQUIRED).DataType(dtypes);\n    }\n};\n}  // namespace ops\n')
    op = make_repo(tmp_path, {OPDEF: text})
    after = run(op_def_edits, op)[OPDEF]
    assert "DataType(std::vector<ge::DataType>((dtypes).size(), ge::DT_INT64));  // optrace" in after
    path = op.parent.parent / OPDEF
    before = host_compile([path], op).errors.get(path, [])
    path.write_text(after)
    assert host_compile([path], op).errors.get(path, []) == before
