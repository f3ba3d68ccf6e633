/* snic's core.p4: the P4-16 core library (P4-16 specification, "The P4 core library").
 * Written for snic from the specification: the names and signatures are the standard ones, so
 * that programs written against p4c's core.p4 compile unchanged. */

#ifndef _CORE_P4_
#define _CORE_P4_

/* The errors every target knows; programs may declare more. */
error {
    NoError,               /* no error */
    PacketTooShort,        /* extract ran past the end of the packet */
    NoMatch,               /* no select case matched */
    StackOutOfBounds,      /* a header stack index out of range */
    HeaderTooShort,        /* more varbit bits extracted than the field holds */
    ParserTimeout,         /* the parser ran too long */
    ParserInvalidArgument  /* a parser operation got a value the target does not support */
}

/* The packet being parsed, read from the front by a cursor. */
extern packet_in {
    /* Copy a fixed-size header from the cursor and make it valid. */
    void extract<T>(out T hdr);
    /* Copy a header with one varbit field of variableFieldSizeInBits bits. */
    void extract<T>(out T variableSizeHeader, in bit<32> variableFieldSizeInBits);
    /* The next bits as a T, without moving the cursor. */
    T lookahead<T>();
    /* Move the cursor sizeInBits bits on. */
    void advance(in bit<32> sizeInBits);
    /* The packet's length in bytes (not all targets know it). */
    bit<32> length();
}

/* The packet being built by the deparser. */
extern packet_out {
    /* Append hdr if it is valid (a struct or stack: each valid header in order). */
    void emit<T>(in T hdr);
}

/* In a parser: when check is false, stop with error toSignal. */
extern void verify(in bool check, in error toSignal);

/* An action that does nothing (the default action of most tables). */
@noWarn("unused")
action NoAction() {}

/* The match kinds every target implements. */
match_kind {
    exact,
    ternary,
    lpm
}

/* Compile-time checks. */
extern bool static_assert(bool check, string message);
extern bool static_assert(bool check);

#endif  /* _CORE_P4_ */
