//! The abstract syntax tree [`crate::parse`] builds: P4-16 declarations, types, expressions and
//! statements as written, before any name resolution or type checking.
//!
//! Every node keeps its byte range ([`Loc`]) in the text that was lexed (the preprocessor's
//! output); [`crate::pre::Expanded::locate`] maps a range back to its file. Names are kept as
//! written: whether `T` is a type, a constant or an extern is for the type checker to decide.

use crate::lex::{IntLit, Token};

/// A byte range `start..end` of the lexed text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Loc {
    /// First byte.
    pub start: u32,
    /// One past the last byte.
    pub end: u32,
}

impl Loc {
    /// The range from the start of `self` to the end of `other`.
    pub fn to(self, other: Loc) -> Loc {
        Loc { start: self.start, end: other.end.max(self.start) }
    }
}

/// An identifier (or a keyword used as a name, like `type` or `apply`) with its range.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Name {
    /// The text.
    pub text: String,
    /// Where.
    pub loc: Loc,
}

/// `@name` or `@name(...)` / `@name[...]`: the body is kept as its raw tokens (without the
/// outer brackets). `@pragma` takes the rest of its line as body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Annotation {
    /// The name, without the `@`.
    pub name: Name,
    /// The tokens of the body.
    pub body: Vec<Token>,
    /// Where, `@` to the closing bracket.
    pub loc: Loc,
}

/// A whole program: the top-level declarations in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// The declarations.
    pub decls: Vec<Decl>,
}

/// A type as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Type {
    /// What type.
    pub kind: TypeKind,
    /// Where.
    pub loc: Loc,
}

/// The kinds of [`Type`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypeKind {
    /// `bit<W>` (`signed` false) or `int<W>` (true); `bit` alone has `width` `None` (one bit),
    /// `int` alone has `width` `None` (arbitrary precision).
    Bits {
        /// `int` rather than `bit`.
        signed: bool,
        /// `W`, an expression (`8`, `(W + 1)`).
        width: Option<Box<Expr>>,
    },
    /// `varbit<W>`.
    Varbit(Box<Expr>),
    /// `bool`
    Bool,
    /// `error`
    Error,
    /// `string`
    String,
    /// `void`
    Void,
    /// `match_kind`
    MatchKind,
    /// `_` (a don't-care type argument).
    DontCare,
    /// A named type with its type arguments (`register<bit<32>, bit<8>>`; none for `T`). A
    /// leading `.` (top-level scope) is dropped.
    Named {
        /// The name.
        name: Name,
        /// The type arguments.
        args: Vec<Type>,
    },
    /// A header stack `T[size]`.
    Stack {
        /// The element type.
        elem: Box<Type>,
        /// The size.
        size: Box<Expr>,
    },
    /// `tuple<T, U>`.
    Tuple(Vec<Type>),
    /// `list<T>`.
    List(Box<Type>),
}

/// A parameter direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// None written (directionless: compile-time or action data).
    None,
    /// `in`
    In,
    /// `out`
    Out,
    /// `inout`
    InOut,
}

/// One parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// Its annotations.
    pub annotations: Vec<Annotation>,
    /// Its direction.
    pub direction: Direction,
    /// Its type.
    pub ty: Type,
    /// Its name.
    pub name: Name,
    /// `= value`, if given.
    pub default: Option<Expr>,
    /// Where.
    pub loc: Loc,
}

/// An argument of a call or instantiation: positional, or named (`f(a = 1)`). `_` is an
/// [`ExprKind::DontCare`] value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arg {
    /// The parameter it names, for a named argument.
    pub name: Option<Name>,
    /// The value.
    pub value: Expr,
    /// Where.
    pub loc: Loc,
}

/// An expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expr {
    /// What expression.
    pub kind: ExprKind,
    /// Where.
    pub loc: Loc,
}

/// A unary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnOp {
    /// `!`
    Not,
    /// `~`
    BitNot,
    /// `-`
    Neg,
    /// `+`
    Plus,
}

/// A binary operator (including `&&&` and `..`, which only keysets use).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinOp {
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Mod,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `|+|`
    AddSat,
    /// `|-|`
    SubSat,
    /// `++`
    Concat,
    /// `<<`
    Shl,
    /// `>>`
    Shr,
    /// `&`
    BitAnd,
    /// `^`
    BitXor,
    /// `|`
    BitOr,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `&&`
    And,
    /// `||`
    Or,
    /// `&&&` (value and mask)
    Mask,
    /// `..` (an inclusive range)
    Range,
}

/// The kinds of [`Expr`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExprKind {
    /// An integer literal.
    Int(IntLit),
    /// `true` / `false`.
    Bool(bool),
    /// A string literal.
    Str(String),
    /// A name (`x`, and `error` in `error.NoMatch`). A leading `.` is dropped.
    Name(String),
    /// `this`
    This,
    /// `default` (a keyset or switch label).
    Default,
    /// `_`
    DontCare,
    /// `base.member`.
    Member {
        /// The expression before the `.`.
        base: Box<Expr>,
        /// The member.
        member: Name,
    },
    /// `base[index]`.
    Index {
        /// The array.
        base: Box<Expr>,
        /// The index.
        index: Box<Expr>,
    },
    /// `base[hi:lo]`.
    Slice {
        /// The bit string.
        base: Box<Expr>,
        /// The high bit.
        hi: Box<Expr>,
        /// The low bit.
        lo: Box<Expr>,
    },
    /// `callee<type_args>(args)`.
    Call {
        /// What is called (a name, or a member: `t.apply`).
        callee: Box<Expr>,
        /// Explicit type arguments.
        type_args: Vec<Type>,
        /// The arguments.
        args: Vec<Arg>,
    },
    /// `(ty) expr`.
    Cast {
        /// The target type.
        ty: Type,
        /// The value.
        expr: Box<Expr>,
    },
    /// A prefix operator.
    Unary {
        /// Which.
        op: UnOp,
        /// The operand.
        expr: Box<Expr>,
    },
    /// A binary operator.
    Binary {
        /// Which.
        op: BinOp,
        /// Left operand.
        lhs: Box<Expr>,
        /// Right operand.
        rhs: Box<Expr>,
    },
    /// `cond ? then : els`.
    Ternary {
        /// The condition.
        cond: Box<Expr>,
        /// The value when true.
        then: Box<Expr>,
        /// The value when false.
        els: Box<Expr>,
    },
    /// `{a, b}` (also `{}`).
    List(Vec<Expr>),
    /// `{ f = 1, g = 2 }`.
    StructInit(Vec<(Name, Expr)>),
    /// A built-in type where an expression goes (`bit<8>` in `bit<8>.minSizeInBits()`): a
    /// `bit`, `int`, `varbit`, `bool` or `tuple` type in operand position.
    Type(Type),
}

/// A statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stmt {
    /// Its annotations (`@atomic { ... }`).
    pub annotations: Vec<Annotation>,
    /// What statement.
    pub kind: StmtKind,
    /// Where.
    pub loc: Loc,
}

/// A block `{ ... }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The statements.
    pub stmts: Vec<Stmt>,
    /// Where, braces included.
    pub loc: Loc,
}

/// The kinds of [`Stmt`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StmtKind {
    /// `{ ... }`
    Block(Block),
    /// `;`
    Empty,
    /// `lhs = rhs;` or a compound assignment `lhs op= rhs;` (`op` is `Some`).
    Assign {
        /// The place assigned.
        lhs: Expr,
        /// The operator of a compound assignment.
        op: Option<BinOp>,
        /// The value.
        rhs: Expr,
    },
    /// A call as a statement (`t.apply();`, `f<T>(x);`).
    Call(Expr),
    /// `if (cond) then else els`.
    If {
        /// The condition.
        cond: Expr,
        /// The branch taken when true.
        then: Box<Stmt>,
        /// The `else` branch.
        els: Option<Box<Stmt>>,
    },
    /// `switch (expr) { cases }`.
    Switch {
        /// The value switched on (often `t.apply().action_run`).
        expr: Expr,
        /// The cases in order.
        cases: Vec<SwitchCase>,
    },
    /// `exit;`
    Exit,
    /// `return;` / `return e;`
    Return(Option<Expr>),
    /// `for (init; cond; update) body`.
    For {
        /// Declarations, assignments and calls before the first iteration.
        init: Vec<Stmt>,
        /// The condition (`None`: always).
        cond: Option<Expr>,
        /// Assignments and calls after each iteration.
        update: Vec<Stmt>,
        /// The body.
        body: Box<Stmt>,
    },
    /// `for (T x in range) body`.
    ForIn {
        /// The variable's type, if written.
        ty: Option<Type>,
        /// The variable.
        name: Name,
        /// What it ranges over (`1 .. n`, a header stack, a list).
        range: Expr,
        /// The body.
        body: Box<Stmt>,
    },
    /// `break;`
    Break,
    /// `continue;`
    Continue,
    /// A local declaration: a variable, constant or instance.
    Decl(Box<Decl>),
}

/// One case of a `switch`: `label: { ... }`, or `label:` falling through to the next case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchCase {
    /// The label: an action name, an expression, or [`ExprKind::Default`].
    pub label: Expr,
    /// The block, `None` for a fall-through label.
    pub body: Option<Block>,
    /// Where.
    pub loc: Loc,
}

/// A declaration, at the top level or local to a parser, control or block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decl {
    /// Its annotations.
    pub annotations: Vec<Annotation>,
    /// What declaration.
    pub kind: DeclKind,
    /// Where (annotations excluded).
    pub loc: Loc,
}

/// A field of a header, header union or struct.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Its annotations.
    pub annotations: Vec<Annotation>,
    /// Its type.
    pub ty: Type,
    /// Its name.
    pub name: Name,
    /// Where.
    pub loc: Loc,
}

/// Which aggregate a [`DeclKind::Struct`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StructKind {
    /// `header`
    Header,
    /// `header_union`
    HeaderUnion,
    /// `struct`
    Struct,
}

/// A member of an `enum`, with its value in a serializable enum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnumMember {
    /// Its annotations.
    pub annotations: Vec<Annotation>,
    /// Its name.
    pub name: Name,
    /// `= value`.
    pub value: Option<Expr>,
}

/// A function or method signature: `ret name<type_params>(params)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionProto {
    /// The return type.
    pub ret: Type,
    /// The name.
    pub name: Name,
    /// The type parameters.
    pub type_params: Vec<Name>,
    /// The parameters.
    pub params: Vec<Param>,
}

/// A member of an `extern` object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Method {
    /// Its annotations.
    pub annotations: Vec<Annotation>,
    /// A constructor (`Name(params);`, with `ret` void), a method, or an abstract method.
    pub kind: MethodKind,
    /// The signature.
    pub proto: FunctionProto,
    /// Where.
    pub loc: Loc,
}

/// What a [`Method`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MethodKind {
    /// A constructor.
    Constructor,
    /// A method.
    Method,
    /// An `abstract` method (the instance supplies it).
    Abstract,
}

/// The signature of a parser, control or package: `name<type_params>(params)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockProto {
    /// The name.
    pub name: Name,
    /// The type parameters.
    pub type_params: Vec<Name>,
    /// The (run-time) parameters.
    pub params: Vec<Param>,
}

/// A parser state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// Its annotations.
    pub annotations: Vec<Annotation>,
    /// Its name.
    pub name: Name,
    /// The statements before the transition.
    pub stmts: Vec<Stmt>,
    /// The transition (`None` when the state has none: it rejects).
    pub transition: Option<Transition>,
    /// Where.
    pub loc: Loc,
}

/// A `transition`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// `transition s;`
    Goto(Name),
    /// `transition select(exprs) { cases }`.
    Select {
        /// The values selected on.
        exprs: Vec<Expr>,
        /// The cases in order.
        cases: Vec<SelectCase>,
        /// Where, `select` to `}`.
        loc: Loc,
    },
}

/// One case of a `select`: `keyset: state;`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectCase {
    /// The keyset, one expression per value selected on (`(1, _)` is two; `default`, `_`, a
    /// mask `a &&& m` or a range `a .. b` are expressions).
    pub keyset: Vec<Expr>,
    /// The next state.
    pub next: Name,
    /// Where.
    pub loc: Loc,
}

/// A table property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableProp {
    /// Its annotations.
    pub annotations: Vec<Annotation>,
    /// `const` was written.
    pub is_const: bool,
    /// What property.
    pub kind: TablePropKind,
    /// Where.
    pub loc: Loc,
}

/// The kinds of [`TableProp`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TablePropKind {
    /// `key = { ... }`
    Key(Vec<KeyElem>),
    /// `actions = { ... }`: each a name or a call with some arguments bound.
    Actions(Vec<ActionRef>),
    /// `entries = { ... }`
    Entries(Vec<Entry>),
    /// Any other `name = value;` (`default_action`, `size`, `implementation`, `counters`, ...).
    Other {
        /// The property's name.
        name: Name,
        /// Its value.
        value: Expr,
    },
}

/// A key element `expr : match_kind`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyElem {
    /// The field matched.
    pub expr: Expr,
    /// The match kind's name.
    pub match_kind: Name,
    /// Its annotations (after the match kind: `@name("k")`).
    pub annotations: Vec<Annotation>,
    /// Where.
    pub loc: Loc,
}

/// An entry of `actions = { ... }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionRef {
    /// Its annotations (`@defaultonly`, `@tableonly`).
    pub annotations: Vec<Annotation>,
    /// The action: a name or a call.
    pub expr: Expr,
    /// Where.
    pub loc: Loc,
}

/// A table entry `keyset : action;`, optionally with `priority = p:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its annotations.
    pub annotations: Vec<Annotation>,
    /// `const` was written before it.
    pub is_const: bool,
    /// `priority = p`.
    pub priority: Option<Expr>,
    /// The keyset (as for [`SelectCase::keyset`]).
    pub keyset: Vec<Expr>,
    /// The action call.
    pub action: Expr,
    /// Where.
    pub loc: Loc,
}

/// The kinds of [`Decl`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeclKind {
    /// `header`, `header_union` or `struct`.
    Struct {
        /// Which.
        kind: StructKind,
        /// The name.
        name: Name,
        /// Type parameters (`struct S<T>`).
        type_params: Vec<Name>,
        /// The fields.
        fields: Vec<Field>,
    },
    /// `enum E { ... }` or `enum bit<8> E { A = 1, ... }`.
    Enum {
        /// The name.
        name: Name,
        /// The underlying type of a serializable enum.
        repr: Option<Type>,
        /// The members.
        members: Vec<EnumMember>,
    },
    /// `error { ... }`
    Error(Vec<Name>),
    /// `match_kind { ... }`
    MatchKind(Vec<Name>),
    /// `typedef T name;`
    Typedef {
        /// The name.
        name: Name,
        /// The type.
        ty: Type,
    },
    /// `type T name;` (a new type).
    NewType {
        /// The name.
        name: Name,
        /// The underlying type.
        ty: Type,
    },
    /// `const T name = value;`
    Const {
        /// The type.
        ty: Type,
        /// The name.
        name: Name,
        /// The value.
        value: Expr,
    },
    /// `T name;` or `T name = value;` (a variable, in a block, parser or control).
    Var {
        /// The type.
        ty: Type,
        /// The name.
        name: Name,
        /// The initial value.
        init: Option<Expr>,
    },
    /// `T(args) name;` or `T<A>(args) name;` (an instance of an extern, parser, control or
    /// package), or `T(args) name = { functions };`.
    Instance {
        /// The type instantiated.
        ty: Type,
        /// The constructor arguments.
        args: Vec<Arg>,
        /// The instance's name.
        name: Name,
        /// `= { ... }`: the functions that implement the abstract methods, if given.
        init: Option<Vec<Decl>>,
    },
    /// `extern ret name<T>(params);`
    ExternFunction(FunctionProto),
    /// `extern Name<T> { methods }`
    ExternObject {
        /// The name.
        name: Name,
        /// The type parameters.
        type_params: Vec<Name>,
        /// Constructors and methods, overloads included.
        methods: Vec<Method>,
    },
    /// `parser P<T>(params);`
    ParserType(BlockProto),
    /// `parser P(params)(ctor_params) { locals states }`.
    Parser {
        /// The signature.
        proto: BlockProto,
        /// The constructor parameters.
        ctor_params: Vec<Param>,
        /// Constants, variables, instances and value sets.
        locals: Vec<Decl>,
        /// The states.
        states: Vec<State>,
    },
    /// `control C<T>(params);`
    ControlType(BlockProto),
    /// `control C(params)(ctor_params) { locals apply { ... } }`.
    Control {
        /// The signature.
        proto: BlockProto,
        /// The constructor parameters.
        ctor_params: Vec<Param>,
        /// Constants, variables, instances, actions and tables.
        locals: Vec<Decl>,
        /// The `apply` block.
        apply: Block,
    },
    /// `package P<T>(params);`
    Package(BlockProto),
    /// `action a(params) { ... }`
    Action {
        /// The name.
        name: Name,
        /// The parameters.
        params: Vec<Param>,
        /// The body.
        body: Block,
    },
    /// `ret f<T>(params) { ... }`
    Function {
        /// The signature.
        proto: FunctionProto,
        /// The body.
        body: Block,
    },
    /// `table t { properties }`
    Table {
        /// The name.
        name: Name,
        /// The properties in order.
        props: Vec<TableProp>,
    },
    /// `value_set<T>(size) name;`
    ValueSet {
        /// The element type.
        ty: Type,
        /// The size.
        size: Expr,
        /// The name.
        name: Name,
    },
}
