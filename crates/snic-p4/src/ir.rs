//! The compiled form of a program, which [`crate::exec`] runs.
//!
//! [`crate::compile`] resolves every name, type and width once: what is left is a tree of
//! expressions and statements over *slots*. Every variable of the program (headers, metadata,
//! parameters and locals of every parser, control, action and function) owns a fixed range of
//! slots in one flat frame of `u128`s, allocated at compile time (P4 has no recursion, so no
//! variable ever needs two copies). A scalar (a `bit<W>`/`int<W>` of up to 128 bits, a `bool`, an
//! enum, an `error`) is one slot; a header is a validity slot followed by its fields; a struct is
//! its fields; a header stack is its `nextIndex` slot followed by its elements; a `varbit` is a
//! length slot followed by its data. Copying a struct is copying a slot range.
//!
//! Signed values are kept as their two's complement in `W` bits (zero-extended in the slot);
//! operations that care (comparisons, shifts right, casts, division) sign-extend first.

use crate::table::MatchKind;

/// An absolute slot index in the frame.
pub type Slot = u32;

/// A storage location: `base`, plus `stride * index` when a header stack is indexed at run time.
#[derive(Debug, Clone, PartialEq)]
pub struct Place {
    /// The slot (of the element 0 when `index` is set).
    pub base: Slot,
    /// A run-time stack index.
    pub index: Option<Box<DynIndex>>,
}

impl Place {
    /// A place with no run-time index.
    pub fn at(base: Slot) -> Place {
        Place { base, index: None }
    }

    /// The place `off` slots further on.
    pub fn offset(&self, off: u32) -> Place {
        Place { base: self.base + off, index: self.index.clone() }
    }
}

/// A run-time index into a header stack.
#[derive(Debug, Clone, PartialEq)]
pub struct DynIndex {
    /// The index.
    pub index: Ex,
    /// Slots per element.
    pub stride: u32,
    /// Elements in the stack (an index at or past it is out of bounds).
    pub count: u32,
}

/// Arithmetic of one width: the mask of `W` bits and whether values are signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arith {
    /// The width in bits (1..=128).
    pub width: u32,
    /// `int<W>` rather than `bit<W>`.
    pub signed: bool,
}

impl Arith {
    /// The mask of `width` low bits.
    pub fn mask(self) -> u128 {
        mask(self.width)
    }

    /// `v` (held in `width` bits) sign-extended to 128 bits when signed.
    pub fn extend(self, v: u128) -> i128 {
        if self.signed { sext(v, self.width) } else { v as i128 }
    }
}

/// The mask of `w` low bits (`w` up to 128).
pub fn mask(w: u32) -> u128 {
    if w >= 128 { u128::MAX } else { (1u128 << w) - 1 }
}

/// `v`'s low `w` bits as a signed number.
pub fn sext(v: u128, w: u32) -> i128 {
    if w == 0 {
        return 0;
    }
    if w >= 128 {
        return v as i128;
    }
    let shift = 128 - w;
    ((v << shift) as i128) >> shift
}

/// A binary operator on bit strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Mod,
    /// `|+|`
    AddSat,
    /// `|-|`
    SubSat,
    /// `&`
    And,
    /// `|`
    Or,
    /// `^`
    Xor,
    /// `<<`
    Shl,
    /// `>>`
    Shr,
}

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

/// What a table application yields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyResult {
    /// `.hit`
    Hit,
    /// `.miss`
    Miss,
    /// `.action_run`: the index of the action in the table's action list.
    ActionRun,
}

/// An expression yielding one scalar.
#[derive(Debug, Clone, PartialEq)]
pub enum Ex {
    /// A constant.
    Const(u128),
    /// The value in a slot.
    Load(Place),
    /// `!b`
    Not(Box<Ex>),
    /// `~x` in `W` bits.
    BitNot(Box<Ex>, Arith),
    /// `-x` in `W` bits.
    Neg(Box<Ex>, Arith),
    /// A binary operator in `W` bits.
    Bin(Op, Box<Ex>, Box<Ex>, Arith),
    /// A comparison of two values of one type (signed when `Arith::signed`).
    Cmp(Cmp, Box<Ex>, Box<Ex>, Arith),
    /// Slot ranges compared for equality: `len` slots.
    EqSlots(Place, Place, u32),
    /// Composite values compared for equality by their shape: two invalid headers are equal
    /// whatever their stale fields hold.
    EqShape(Place, Place, Box<Shape>),
    /// Short-circuit `&&`.
    And(Box<Ex>, Box<Ex>),
    /// Short-circuit `||`.
    Or(Box<Ex>, Box<Ex>),
    /// `c ? a : b`.
    Cond(Box<Ex>, Box<Ex>, Box<Ex>),
    /// `x[lo + w - 1 : lo]`: shift right by `lo`, keep `mask`.
    Slice(Box<Ex>, u32, u128),
    /// `hi ++ lo`, with `lo` being `lo_width` bits wide.
    Concat(Box<Ex>, Box<Ex>, u32),
    /// A cast between bit string types: sign-extend from `from` when signed, keep `to`'s bits.
    Cast(Box<Ex>, Arith, Arith),
    /// Any non-zero value as `true` (bit<1> to bool needs nothing else).
    NonZero(Box<Ex>),
    /// Apply a table and yield one of its results.
    Apply(u32, ApplyResult),
    /// Run a function body and yield the value it returned (left in slot `ret`).
    Call(Box<Call>, Slot),
    /// A header union's validity: any member valid (their validity slots).
    AnyValid(Place, Vec<u32>),
    /// `stack.lastIndex` (the stack's `nextIndex` slot, minus one, in 32 bits).
    LastIndex(Place),
    /// `packet_in.lookahead<T>()` of a scalar `T` of `width` bits.
    Lookahead(u32),
    /// `packet_in.length()`: the packet's length in bytes.
    PacketLength,
    /// A value computed by an extern (`random`, a register read as a value...).
    Extern(Box<ExternCall>),
    /// Statements run for their effect, then a value (used to sequence composite evaluation).
    Seq(Box<[St]>, Box<Ex>),
}

/// A call: arguments copied in, the body run, results copied out.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// Statements copying arguments into parameter slots (and zeroing `out` parameters).
    pub copy_in: Vec<St>,
    /// What runs.
    pub body: Body,
    /// Statements copying `out`/`inout` parameters back to the arguments.
    pub copy_out: Vec<St>,
}

/// A callable body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// An action (index into [`Compiled::actions`]).
    Action(u32),
    /// A function (index into [`Compiled::functions`]).
    Function(u32),
    /// A control's apply block (index into [`Compiled::controls`]).
    Control(u32),
    /// A parser's state machine (index into [`Compiled::parsers`]).
    Parser(u32),
}

/// The values of a composite, leaf by leaf.
#[derive(Debug, Clone, PartialEq)]
pub struct Leaf {
    /// The value.
    pub ex: Ex,
    /// Its width in bits.
    pub width: u32,
    /// The validity slot of the header holding it: a field of an invalid header is left out
    /// of a field list (BMv2's rule).
    pub valid: Option<Place>,
}

/// A statement.
#[derive(Debug, Clone, PartialEq)]
pub enum St {
    /// Store a scalar.
    Set(Place, Ex),
    /// Copy `len` slots from one place to another.
    Copy(Place, Place, u32),
    /// Zero `len` slots (headers become invalid).
    Zero(Place, u32),
    /// `h.setValid()` / `h.setInvalid()` of a header of `len` slots (its validity slot first).
    /// `setValid` on an invalid header zeroes its fields. `union` lists the validity slot
    /// offsets of the other members of the header union it belongs to (relative to `hdr`), which
    /// `setValid` invalidates.
    SetValid {
        /// The header's size in bytes: BMv2 adds it to (or takes it from) the packet's length
        /// when the validity changes.
        bytes: u32,
        /// The header.
        hdr: Place,
        /// Valid or not.
        valid: bool,
        /// The header's slots, validity included.
        len: u32,
        /// The other members of its union, as offsets from `hdr` (may be negative).
        union: Vec<(i32, u32)>,
    },
    /// `if (c) a else b`.
    If(Ex, Vec<St>, Vec<St>),
    /// `switch`: the first case whose labels contain the value; `default` otherwise.
    Switch(Ex, Vec<(Vec<u128>, u32)>, Option<u32>, Vec<Vec<St>>),
    /// A table applied as a statement.
    Apply(u32),
    /// A call as a statement.
    Call(Box<Call>),
    /// An extern method or function.
    Extern(Box<ExternCall>),
    /// `exit`
    Exit,
    /// `return`
    Return,
    /// `break`
    Break,
    /// `continue`
    Continue,
    /// A loop: `cond` checked before each iteration, `update` after each.
    Loop {
        /// Checked before each iteration (`None`: always).
        cond: Option<Ex>,
        /// The body.
        body: Vec<St>,
        /// Run after each iteration (also after `continue`).
        update: Vec<St>,
    },
    /// A block.
    Block(Vec<St>),
    /// `stack.push_front(n)` / `pop_front(n)` on a stack of `count` elements of `stride` slots.
    StackShift {
        /// The stack (its `nextIndex` slot).
        stack: Place,
        /// Elements.
        count: u32,
        /// Slots per element.
        stride: u32,
        /// Positive: push_front; negative: pop_front.
        by: i64,
    },
    /// Header unions: after writing member `at` (offset from `union`), invalidate the others
    /// if it is valid.
    UnionFixup {
        /// The union's first slot.
        union: Place,
        /// Validity slot offsets of every member.
        members: Vec<u32>,
        /// The member written.
        at: u32,
    },
    /// A trace line (from `log_msg`).
    Log(String, Vec<(Ex, u32)>),
}

/// How a header is laid out: its fields' slot offsets (after the validity slot) and widths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderLayout {
    /// The header type's name.
    pub name: String,
    /// `(slot offset from the header's validity slot, width in bits)`, in order.
    pub fields: Vec<(u32, u32)>,
    /// The `varbit` field: `(index in fields, maximum bits)`; its slot holds the current length
    /// and the following slots its data, 128 bits per slot (the last slot right-aligned).
    pub varbit: Option<(usize, u32)>,
    /// Slots, validity included.
    pub slots: u32,
    /// Fixed bits (the varbit counts as zero).
    pub fixed_bits: u32,
    /// Each field's bit offset from the header's start (the varbit's data counts as zero).
    pub bit_offs: Vec<u32>,
    /// The header can be read through a 16-byte window: no varbit, whole bytes,
    /// at most 64 bytes, no field wider than 120 bits.
    pub fast: bool,
}

/// A composite's layout for `emit` and `extract`.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// A header.
    Header(u32),
    /// A header union: its members at slot offsets.
    Union(Vec<(u32, Shape)>),
    /// A struct: its fields at slot offsets (scalars are skipped by `emit`).
    Struct(Vec<(u32, Shape)>),
    /// A header stack: `count` elements of `stride` slots after the `nextIndex` slot.
    Stack {
        /// Elements.
        count: u32,
        /// Slots per element.
        stride: u32,
        /// The element.
        elem: Box<Shape>,
    },
    /// A scalar (not emitted).
    Scalar,
}

/// A call of an extern method or function the executor implements.
#[derive(Debug, Clone, PartialEq)]
pub enum ExternCall {
    /// `packet_in.extract(hdr)` or `extract(hdr, bits)` of a header (layout index). With
    /// `stack`, the header is `stack.next`: (the stack's nextIndex place, count, stride).
    Extract {
        /// The header.
        hdr: Place,
        /// Its layout.
        layout: u32,
        /// The varbit's length in bits, for the two-argument form.
        varbits: Option<Ex>,
        /// `stack.next` (or `stack.next.member` for a stack of header unions): the stack's
        /// nextIndex place, element count, stride and the member's offset in an element.
        next_of: Option<(Place, u32, u32, u32)>,
        /// The validity slots of the other members of the header union the header belongs to,
        /// as offsets from the header's (invalidated by a successful extract).
        union: Vec<(i32, u32)>,
    },
    /// `packet_in.lookahead<T>()` of a header or struct written to `dst` with a shape.
    LookaheadInto {
        /// Where it goes.
        dst: Place,
        /// The shape (a header or a struct of scalars).
        fields: Vec<(u32, u32)>,
        /// The validity slot to set, for a header.
        valid: Option<u32>,
    },
    /// `packet_in.advance(bits)`.
    Advance(Ex),
    /// `verify(cond, error)`.
    Verify(Ex, Ex),
    /// `packet_out.emit(x)`.
    Emit(Place, Shape),
    /// `mark_to_drop(standard_metadata)`.
    MarkToDrop,
    /// `register.read(out, index)`: register instance, destination, index.
    RegisterRead(u32, Place, Ex),
    /// `register.write(index, value)`.
    RegisterWrite(u32, Ex, Ex),
    /// `counter.count(index)`.
    Count(u32, Ex),
    /// `direct_counter.count()` (counting happens on the table hit; this is a no-op marker).
    DirectCount(u32),
    /// `meter.execute_meter(index, out)`.
    Meter(u32, Ex, Place, u32),
    /// `direct_meter.read(out)`.
    DirectMeterRead(u32, Place, u32),
    /// `hash(out, algo, base, data, max)`.
    Hash {
        /// The calculation (index into [`Compiled::calcs`]).
        calc: u32,
        /// Where the result goes.
        dst: Place,
        /// Its width.
        width: u32,
        /// The algorithm (v1model's `HashAlgorithm` member index).
        algo: u32,
        /// The base.
        base: Ex,
        /// The data, leaf by leaf.
        data: Vec<Leaf>,
        /// The modulus (0: none).
        max: Ex,
    },
    /// `verify_checksum` / `update_checksum` (and `_with_payload`).
    Checksum {
        /// The calculation (index into [`Compiled::calcs`]).
        calc: u32,
        /// The validity slot of the header holding the checksum field.
        field_valid: Option<Place>,
        /// `update_` rather than `verify_`.
        update: bool,
        /// `_with_payload`.
        with_payload: bool,
        /// The condition.
        cond: Ex,
        /// The data.
        data: Vec<Leaf>,
        /// The checksum field.
        field: Place,
        /// Its width.
        width: u32,
        /// The algorithm.
        algo: u32,
    },
    /// `Checksum16.get(data)` into a destination.
    Checksum16Get {
        /// Where it goes.
        dst: Place,
        /// The data.
        data: Vec<Leaf>,
    },
    /// `random(out, lo, hi)`.
    Random(Place, u32, Ex, Ex),
    /// `clone(type, session)` / `clone_preserving_field_list(type, session, list)`.
    Clone {
        /// E2E rather than I2E.
        e2e: bool,
        /// The session.
        session: Ex,
        /// The field list preserved (`None`: none).
        list: Option<u32>,
    },
    /// `resubmit_preserving_field_list(list)`.
    Resubmit(Option<u32>),
    /// `recirculate_preserving_field_list(list)`.
    Recirculate(Option<u32>),
    /// `truncate(length)`.
    Truncate(Ex),
    /// `digest(receiver, data)`: the digest type (index into [`Compiled::digests`]) and the
    /// values.
    Digest(u32, Vec<Leaf>),
    /// `assert(c)` / `assume(c)`.
    Assert(Ex),
    /// PNA `send_to_port(port)`: the packet leaves by `port` (the last forwarding call wins).
    SendToPort(Ex),
    /// PNA `drop_packet()`: the packet is dropped (the last forwarding call wins).
    DropPacket,
    /// PNA `add_entry(action, params, profile)` in the default action of an `add_on_miss`
    /// table: an entry keyed by the table's current key values; `dst` gets whether it was
    /// added.
    AddEntry {
        /// The action (index into [`Compiled::actions`]).
        action: u32,
        /// The values of its data parameters, in order.
        args: Vec<Ex>,
        /// The expire time profile.
        profile: Ex,
        /// Where the result (a bool) goes.
        dst: Slot,
    },
    /// PNA `InternetChecksum.add(data)` / `subtract(data)`: the ones' complement sum in slot
    /// `state` (16 bits, not complemented) plus (or minus) the data's.
    CsumAdd {
        /// The instance's running sum.
        state: Slot,
        /// The data (16-bit words, zero-padded).
        data: Vec<Leaf>,
        /// `subtract` rather than `add`.
        subtract: bool,
    },
    /// PNA `restart_expire_timer()`: the hit entry's idle time starts again.
    RestartExpireTimer,
    /// PNA `set_entry_expire_time(profile)`: the hit entry's time to live becomes the
    /// profile's, its idle time starting again.
    SetEntryExpireTime(Ex),
}

/// A parser's compiled state machine.
#[derive(Debug, Clone, PartialEq)]
pub struct ParserIr {
    /// The parser's name.
    pub name: String,
    /// The states (`start` first).
    pub states: Vec<StateIr>,
}

/// A parser state.
#[derive(Debug, Clone, PartialEq)]
pub struct StateIr {
    /// Its name.
    pub name: String,
    /// Its statements.
    pub body: Vec<St>,
    /// Where it goes.
    pub next: Trans,
}

/// Where a parser goes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// `accept`
    Accept,
    /// `reject`
    Reject,
    /// A state (index).
    State(u32),
}

/// A transition.
#[derive(Debug, Clone, PartialEq)]
pub enum Trans {
    /// Straight to a state.
    Goto(Next),
    /// `select`: the values and the cases in order; no match rejects with `NoMatch`.
    Select(Vec<(Ex, u32)>, Vec<(Vec<KeySet>, Next)>),
}

/// One component of a `select` case.
#[derive(Debug, Clone, PartialEq)]
pub enum KeySet {
    /// `_` / `default`.
    Any,
    /// `value &&& mask` (a plain value has an all-ones mask).
    Mask(u128, u128),
    /// `lo .. hi`.
    Range(u128, u128),
    /// A value set (index): matches any of its members.
    ValueSet(u32),
}

/// A compiled action.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionIr {
    /// Its control-plane name (`MyIngress.set_nhop`).
    pub name: String,
    /// Its parameters: name, slot, width and direction (`true`: directionless, filled by the
    /// control plane).
    pub params: Vec<ParamIr>,
    /// The body.
    pub body: Vec<St>,
    /// `@id(N)`
    pub id: Option<u32>,
}

/// An action parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamIr {
    /// Its name.
    pub name: String,
    /// Its slot.
    pub slot: Slot,
    /// Its width in bits.
    pub width: u32,
    /// Directionless: action data from the control plane.
    pub data: bool,
}

/// A compiled function.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionIr {
    /// Its name.
    pub name: String,
    /// The body.
    pub body: Vec<St>,
}

/// A compiled control.
#[derive(Debug, Clone, PartialEq)]
pub struct ControlIr {
    /// Its name.
    pub name: String,
    /// Statements that initialise its locals, then the apply block.
    pub body: Vec<St>,
}

/// One key field of a table.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyIr {
    /// Its control-plane name (`hdr.ipv4.dstAddr`, `hdr.ipv4.$valid$`).
    pub name: String,
    /// The value matched.
    pub ex: Ex,
    /// Its width in bits.
    pub width: u32,
    /// Its match kind.
    pub kind: MatchKind,
}

/// An action as a table lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct TableAction {
    /// The action.
    pub action: u32,
    /// Arguments bound in the `actions` list, for the leading non-data parameters.
    pub bound: Vec<St>,
    /// `@defaultonly`
    pub default_only: bool,
    /// `@tableonly`
    pub table_only: bool,
}

/// An action with its control-plane arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionCall {
    /// Index into the table's [`TableIr::actions`].
    pub action: u32,
    /// The values of the action's data parameters, in order.
    pub args: Vec<u128>,
}

/// A `const entries` (or `entries`) entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ConstEntry {
    /// One match per key field.
    pub matches: Vec<crate::table::FieldMatch>,
    /// Its priority (larger wins).
    pub priority: Option<i64>,
    /// The action.
    pub call: ActionCall,
}

/// A compiled table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableIr {
    /// Its control-plane name (`MyIngress.ipv4_lpm`).
    pub name: String,
    /// `@id(N)`
    pub id: Option<u32>,
    /// The key.
    pub keys: Vec<KeyIr>,
    /// The actions it may run.
    pub actions: Vec<TableAction>,
    /// The default action.
    pub default: ActionCall,
    /// `const default_action`.
    pub default_const: bool,
    /// Its entries from the program.
    pub entries: Vec<ConstEntry>,
    /// `const entries`: the control plane may not change them.
    pub entries_const: bool,
    /// `size` (BMv2's default is 1024... we use it as the capacity).
    pub size: usize,
    /// `counters = c` (a direct counter instance).
    pub direct_counter: Option<u32>,
    /// `meters = m` (a direct meter instance).
    pub direct_meter: Option<u32>,
    /// `implementation = p` (an action profile or selector): entries name the profile's
    /// members or groups instead of actions.
    pub implementation: Option<u32>,
    /// The `selector` key fields, hashed by an action selector to choose a group's member.
    pub selector_keys: Vec<Leaf>,
    /// The slot holding the last application's hit flag.
    pub hit_slot: Slot,
    /// The slot holding the last application's action index.
    pub action_slot: Slot,
    /// Slots of the result of the last lookup's direct meter, if any: (place, width).
    pub meter_out: Option<(Place, u32)>,
    /// PNA `add_on_miss = true`: the default action may `add_entry`.
    pub add_on_miss: bool,
    /// What happens to idle entries (`support_timeout`, `pna_idle_timeout`).
    pub idle: IdleTimeout,
}

/// What happens to a table's entries once idle past their time to live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IdleTimeout {
    /// Nothing: entries live until deleted.
    #[default]
    None,
    /// The control plane is told (v1model `support_timeout = true`, PNA `NOTIFY_CONTROL`).
    Notify,
    /// The entry is deleted (PNA `AUTO_DELETE`).
    AutoDelete,
}

/// The kinds of extern instance the executor keeps state for.
#[derive(Debug, Clone, PartialEq)]
pub enum InstanceKind {
    /// `register<T, I>(size)`: `width` bits per cell.
    Register {
        /// Cells.
        size: u32,
        /// Bits per cell.
        width: u32,
    },
    /// `counter(size, type)`.
    Counter {
        /// Cells.
        size: u32,
        /// 0 packets, 1 bytes, 2 both.
        kind: u32,
    },
    /// `direct_counter(type)`.
    DirectCounter(u32),
    /// `meter(size, type)`.
    Meter {
        /// Cells.
        size: u32,
        /// Bytes rather than packets.
        bytes: bool,
    },
    /// `direct_meter<T>(type)`.
    DirectMeter {
        /// Bytes rather than packets.
        bytes: bool,
    },
    /// `action_profile(size)`.
    ActionProfile(u32),
    /// `action_selector(algo, size, width)`.
    ActionSelector {
        /// The hash algorithm.
        algo: u32,
        /// Members.
        size: u32,
        /// Output width.
        width: u32,
    },
    /// Something stateless (`Checksum16`).
    Stateless,
}

/// An extern instance.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceIr {
    /// Its control-plane name (`MyIngress.my_counter`).
    pub name: String,
    /// What it is.
    pub kind: InstanceKind,
    /// `@id(N)`
    pub id: Option<u32>,
}

/// A value set.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueSetIr {
    /// Its name.
    pub name: String,
    /// Its size.
    pub size: u32,
    /// Its width.
    pub width: u32,
    /// `@id(N)`
    pub id: Option<u32>,
}

/// A named scalar field the control plane sees (a digest's or a controller header's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpField {
    /// Its name (`a.b` for a field of a nested struct).
    pub name: String,
    /// Its width in bits.
    pub width: u32,
    /// `@id(N)` on the field, if any.
    pub id: Option<u32>,
}

/// A digest type: what `digest<T>(...)` sends to the control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestIr {
    /// The type's name (`mac_learn_digest_t`).
    pub type_name: String,
    /// Its scalar fields in order.
    pub fields: Vec<CpField>,
}

/// A header annotated `@controller_header("packet_in")` (or `"packet_out"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerHeaderIr {
    /// The annotation's name: `packet_in` or `packet_out`.
    pub name: String,
    /// `@id(N)` on the header type.
    pub id: Option<u32>,
    /// The header type's name.
    pub type_name: String,
    /// Its fields in header order.
    pub fields: Vec<CpField>,
}

/// The slots of `standard_metadata` the architecture reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StdMeta {
    /// The struct's first slot.
    pub base: Slot,
    /// Its slot count.
    pub len: u32,
    /// `ingress_port`
    pub ingress_port: Slot,
    /// `egress_spec`
    pub egress_spec: Slot,
    /// `egress_port`
    pub egress_port: Slot,
    /// `instance_type`
    pub instance_type: Slot,
    /// `packet_length`
    pub packet_length: Slot,
    /// `enq_timestamp`
    pub enq_timestamp: Slot,
    /// `enq_qdepth`
    pub enq_qdepth: Slot,
    /// `deq_timedelta`
    pub deq_timedelta: Slot,
    /// `deq_qdepth`
    pub deq_qdepth: Slot,
    /// `ingress_global_timestamp`
    pub ingress_global_timestamp: Slot,
    /// `egress_global_timestamp`
    pub egress_global_timestamp: Slot,
    /// `mcast_grp`
    pub mcast_grp: Slot,
    /// `egress_rid`
    pub egress_rid: Slot,
    /// `checksum_error`
    pub checksum_error: Slot,
    /// `parser_error`
    pub parser_error: Slot,
    /// `priority`
    pub priority: Slot,
}

/// The architecture a program is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Arch {
    /// BMv2's v1model (`V1Switch`).
    #[default]
    V1Model,
    /// P4.org's Portable NIC Architecture (`PNA_NIC`).
    Pna(PnaMeta),
}

/// The slots of a PNA program's intrinsic metadata the architecture fills in, and its pre
/// control. A field a program's structs lack is `u32::MAX` (never written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PnaMeta {
    /// The pre control (index into [`Compiled::controls`]); the main parser, control and
    /// deparser are [`Compiled::parser`], [`Compiled::ingress`], [`Compiled::deparser`].
    pub pre: u32,
    /// `input_port` of the main parser's, the pre control's and the main control's input.
    pub input_port: [Slot; 3],
    /// `direction` of the same three.
    pub direction: [Slot; 3],
    /// `pass` of the same three.
    pub pass: [Slot; 3],
    /// `loopedback` of the same three.
    pub loopedback: [Slot; 3],
    /// `parser_error` of the pre control's and the main control's input.
    pub parser_error: [Slot; 2],
    /// `timestamp` of the main control's input (nanoseconds).
    pub timestamp: Slot,
}

/// A whole compiled program.
#[derive(Debug, Clone, PartialEq)]
pub struct Compiled {
    /// Slots in a packet's frame.
    pub frame_len: u32,
    /// The parsers (the top-level one is [`Compiled::parser`]).
    pub parsers: Vec<ParserIr>,
    /// The controls.
    pub controls: Vec<ControlIr>,
    /// Every action.
    pub actions: Vec<ActionIr>,
    /// Every function.
    pub functions: Vec<FunctionIr>,
    /// Every table.
    pub tables: Vec<TableIr>,
    /// Every extern instance.
    pub instances: Vec<InstanceIr>,
    /// Every value set.
    pub value_sets: Vec<ValueSetIr>,
    /// Header layouts.
    pub layouts: Vec<HeaderLayout>,
    /// The error names by code.
    pub errors: Vec<String>,
    /// The top-level parser.
    pub parser: u32,
    /// `VerifyChecksum`, `Ingress`, `Egress`, `ComputeChecksum`, `Deparser` controls.
    pub verify: u32,
    /// The ingress control.
    pub ingress: u32,
    /// The egress control.
    pub egress: u32,
    /// The compute-checksum control.
    pub compute: u32,
    /// The deparser control.
    pub deparser: u32,
    /// `standard_metadata`.
    pub std: StdMeta,
    /// The headers' slots (the parser's `out H`).
    pub hdr: (Slot, u32),
    /// The user metadata's slots.
    pub meta: (Slot, u32),
    /// The hash and checksum calculations, one per call site: a name (for the CLI's
    /// `set_crc*_parameters`) and the algorithm (v1model's `HashAlgorithm` member index).
    pub calcs: Vec<(String, u32)>,
    /// Field lists for `@field_list(N)`: for each list id, the slots (and lengths) to keep.
    pub field_lists: Vec<(u32, Vec<(Slot, u32)>)>,
    /// The digest types, in order of first use.
    pub digests: Vec<DigestIr>,
    /// Headers annotated `@controller_header`.
    pub controller_headers: Vec<ControllerHeaderIr>,
    /// The architecture.
    pub arch: Arch,
}
