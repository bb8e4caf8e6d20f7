"""The call graph follows what C++ resolves through classes: inherited methods (public,
protected, several levels, class templates), `Base::Step()`, `this->Step()`,
`using Base::Step;`, CRTP casts, and overrides (the derived class's own wins)."""

from __future__ import annotations

from pathlib import Path

from class_op import class_op

from optrace.engine.analysis import Analysis, analyse_operator
from optrace.pipeline.plan import plan_operator

# The issue's fifteen lines: Process comes from the base class.
ISSUE = """\
#pragma once
class Base {
public:
    __aicore__ inline void Process() { CopyIn(); Compute(); AscendC::SyncAll(); CopyIn(); }
protected:
    __aicore__ inline void CopyIn()
    { for (int i = 0; i < n_; ++i) { AscendC::DataCopy(a_, b_, n_); a_ += 1; b_ += 1; } }
    __aicore__ inline void Compute()
    { for (int i = 0; i < n_; ++i) { AscendC::Add(a_, a_, b_, n_); a_ += 1; b_ += 1; } }
    int n_ = 0;
    AscendC::LocalTensor<float> a_;
    AscendC::LocalTensor<float> b_;
};
class Sel : public Base {
public:
    __aicore__ inline void Init(GM_ADDR x) { n_ = 4; }
};
"""


def _op(tmp_path: Path, header: str) -> Path:
    return class_op(tmp_path, "sel_op", "Sel", header, "sel.h")


def _calls(an: Analysis) -> set[tuple[str, str]]:
    g = an.callgraph
    return {(g.nodes[a]["label"], g.nodes[b]["label"]) for a, b in g.edges}


def test_a_step_inherited_from_the_base_plans_its_phases(tmp_path: Path) -> None:
    op = _op(tmp_path, ISSUE)
    calls = _calls(analyse_operator(op))
    assert {("sel_op", "Sel::Init"), ("sel_op", "Base::Process"), ("Base::Process", "Base::CopyIn"),
            ("Base::Process", "Base::Compute")} <= calls
    labels = [r.label for r in plan_operator(op).root.walk()]
    assert len(labels) > 2 and any("compute" in label for label in labels), labels


LEVELS = """\
#pragma once
template <typename T>
class Level1 {
protected:
    __aicore__ inline void Stage() { Work(); }
    __aicore__ inline void Work() { }
    __aicore__ inline void Process() { Stage(); }
};
template <typename T>
class Level2 : public Level1<T> {
public:
    __aicore__ inline void Flush() { }
};
class Sel : private Level2<float> {
    using Base = Level2<float>;
public:
    using Level1<float>::Work;
    __aicore__ inline void Init(GM_ADDR x) { }
    __aicore__ inline void Process()
    {
        this->Stage();
        Base::Flush();
        Level1<float>::Stage();
        Work();
    }
};
"""


def test_levels_qualified_calls_this_and_using(tmp_path: Path) -> None:
    calls = _calls(analyse_operator(_op(tmp_path, LEVELS)))
    # The derived class's own Process wins over Level1's.
    assert ("sel_op", "Sel::Process") in calls and ("sel_op", "Level1::Process") not in calls
    assert {("Sel::Process", "Level1::Stage"), ("Sel::Process", "Level2::Flush"),
            ("Sel::Process", "Level1::Work"), ("Level1::Stage", "Level1::Work")} <= calls


CRTP = """\
#pragma once
template <typename Derived>
class Pipeline {
public:
    __aicore__ inline void Process()
    {
        static_cast<Derived *>(this)->Load();
        static_cast<const Derived *>(this)->Store();
        reinterpret_cast<Derived*>(this)->Load();
        Stage();
    }
    __aicore__ inline void Stage()
    {
        Derived *self = static_cast<Derived *>(this);
        self->Store();
    }
};
class Sel : public Pipeline<Sel> {
public:
    __aicore__ inline void Init(GM_ADDR x) { }
    __aicore__ inline void Load() { }
    __aicore__ inline void Store() const { }
};
class Other : public Pipeline<Other> {
public:
    __aicore__ inline void Load() { }
};
"""


def test_crtp_reaches_the_derived_class_of_the_base_template(tmp_path: Path) -> None:
    calls = _calls(analyse_operator(_op(tmp_path, CRTP)))
    assert {("sel_op", "Pipeline::Process"), ("Pipeline::Process", "Sel::Load"),
            ("Pipeline::Process", "Sel::Store"), ("Pipeline::Stage", "Sel::Store")} <= calls
    # Every class deriving from the template is a candidate of the cast: Other's Load too.
    assert ("Pipeline::Process", "Other::Load") in calls


OVERRIDE = """\
#pragma once
class A {
public:
    __aicore__ inline void Step() { }
    __aicore__ inline void Process() { Step(); }
};
class B : public A {
public:
    __aicore__ inline void Step() { }
};
class Sel : public B {
public:
    __aicore__ inline void Init(GM_ADDR x) { }
    __aicore__ inline void Run() { Step(); }
};
"""


def test_the_nearest_declaration_wins(tmp_path: Path) -> None:
    an = analyse_operator(_op(tmp_path, OVERRIDE))
    idx = an.index
    assert [f.display for f in idx.methods({"Sel"}, "Step")] == ["B::Step"]
    assert [f.display for f in idx.methods({"Sel"}, "Process")] == ["A::Process"]
    assert idx.ancestry("Sel") == ["Sel", "B", "A"]
    # A::Process calls A's Step (no virtual dispatch in kernel code).
    assert ("A::Process", "A::Step") in _calls(an)


def test_cyclic_bases_and_usings_terminate(tmp_path: Path) -> None:
    header = """\
#pragma once
class P : public Q { using Q::Step; };
class Q : public P { using P::Step; };
class Sel : public Q {
public:
    __aicore__ inline void Init(GM_ADDR x) { }
    __aicore__ inline void Process() { Step(); }
};
"""
    an = analyse_operator(_op(tmp_path, header))
    assert an.index.methods({"Sel"}, "Step") == []
    assert an.index.ancestry("Sel") == ["Sel", "Q", "P"]


def test_a_template_parameter_is_a_derived_class_only_the_crtp_way(tmp_path: Path) -> None:
    """`T impl_; impl_.Process()` in a class template instantiated with another class is
    not a call of the deriving class's Process (only `Base<Self>` makes Self the T)."""
    header = """\
#pragma once
class Other {
public:
    __aicore__ inline void Process() { }
};
template <typename T>
class Runner {
public:
    __aicore__ inline void Run() { impl_.Process(); }
    T impl_;
};
class Sel : public Runner<Other> {
public:
    __aicore__ inline void Init(GM_ADDR x) { }
    __aicore__ inline void Process() { Run(); }
};
"""
    calls = _calls(analyse_operator(_op(tmp_path, header)))
    assert ("Sel::Process", "Runner::Run") in calls
    assert ("Runner::Run", "Sel::Process") not in calls



TWO_FILLS = """\
#pragma once
class Left {
public:
    __aicore__ inline void Run() { Fill<float>(); }
    template <typename T>
    __aicore__ inline void Fill() { for (int i = 0; i < 4; ++i) { AscendC::SyncAll(); } }
};
class Right {
public:
    __aicore__ inline void Run() { Fill<float>(); }
    template <typename T>
    __aicore__ inline void Fill() { for (int i = 0; i < 4; ++i) { AscendC::PipeBarrier(); } }
};
class Sel {
public:
    __aicore__ inline void Init(GM_ADDR x) { }
    __aicore__ inline void Process() { left_.Run(); right_.Run(); }
    Left left_;
    Right right_;
};
"""


def test_one_template_call_text_resolves_by_the_calling_class(tmp_path: Path) -> None:
    """`Fill<float>()` written the same in two classes that each have a `Fill`: each
    reaches its own (a call of a template or qualified name is resolved once per text and
    calling class, not once per text)."""
    calls = _calls(analyse_operator(_op(tmp_path, TWO_FILLS)))
    assert {("Left::Run", "Left::Fill"), ("Right::Run", "Right::Fill")} <= calls
    assert not {("Left::Run", "Right::Fill"), ("Right::Run", "Left::Fill")} & calls
