/* snic's pna.p4: the Portable NIC Architecture (P4.org PNA), written for snic from the PNA
 * specification. Names and signatures are the specification's, so PNA programs compile
 * unchanged; what snic does not run is declared but refused by the compiler with an
 * `unsupported: ...` error when a program uses it.
 *
 * How snic runs a PNA_NIC (crates/snic-p4/src/v1model.rs, `Arch::Pna`): per packet, main
 * parser -> pre control -> main control -> main deparser. The packet leaves by the port the
 * last `send_to_port` named; without one (or after `drop_packet`) it is dropped. A packet whose
 * input port is one of the switch's host ports (`Switch::set_host_ports`) is HOST_TO_NET,
 * any other NET_TO_HOST. */

#ifndef __PNA_P4__
#define __PNA_P4__

#include <core.p4>

/* Widths. The specification leaves them to the target; these are the usual ones. */
typedef bit<32> PortIdUint_t;
typedef bit<32> InterfaceIdUint_t;
typedef bit<32> MulticastGroupUint_t;
typedef bit<16> MirrorSessionIdUint_t;
typedef bit<8>  MirrorSlotIdUint_t;
typedef bit<8>  ClassOfServiceUint_t;
typedef bit<16> PacketLengthUint_t;
typedef bit<16> MulticastInstanceUint_t;
typedef bit<64> TimestampUint_t;
typedef bit<32> FlowIdUint_t;
typedef bit<8>  ExpireTimeProfileIdUint_t;
typedef bit<3>  PassNumberUint_t;
typedef bit<32> SecurityAssocIdUint_t;

typedef PortIdUint_t              PortId_t;
typedef InterfaceIdUint_t         InterfaceId_t;
typedef MulticastGroupUint_t      MulticastGroup_t;
typedef MirrorSessionIdUint_t     MirrorSessionId_t;
typedef MirrorSlotIdUint_t        MirrorSlotId_t;
typedef ClassOfServiceUint_t      ClassOfService_t;
typedef PacketLengthUint_t        PacketLength_t;
typedef MulticastInstanceUint_t   MulticastInstance_t;
typedef TimestampUint_t           Timestamp_t;      /* nanoseconds (the `now_ns` of a packet) */
typedef FlowIdUint_t              FlowId_t;
typedef ExpireTimeProfileIdUint_t ExpireTimeProfileId_t;
typedef PassNumberUint_t          PassNumber_t;
typedef SecurityAssocIdUint_t     SecurityAssocId_t;
typedef error                     ParserError_t;

const InterfaceId_t PNA_PORT_CPU = 0xfffffffd;
const MirrorSessionId_t PNA_MIRROR_SESSION_TO_CPU = 0;

/* The `pna_idle_timeout` table property: what happens to an entry idle past its expire time.
 * NOTIFY_CONTROL reports it to the control plane (Switch::take_idle_expired), once per idle
 * period; AUTO_DELETE removes it (snic's addition beside the specification's two). */
enum PNA_IdleTimeout_t {
    NO_TIMEOUT,
    NOTIFY_CONTROL,
    AUTO_DELETE
}

/* Match kinds beside core.p4's exact, ternary and lpm. */
match_kind {
    range,     /* lo..hi inclusive */
    selector,  /* the key of an action selector */
    optional   /* exact, or any */
}

/* Hash algorithms. TARGET_DEFAULT is CRC-32 in snic. */
enum PNA_HashAlgorithm_t {
    TARGET_DEFAULT,
    CRC32,
    CRC16,
    ONES_COMPLEMENT16,
    IDENTITY
}

/* A hash unit: get_hash(data), or base + (hash mod max). */
extern Hash<O> {
    Hash(PNA_HashAlgorithm_t algo);
    O get_hash<D>(in D data);
    O get_hash<T, D>(in T base, in D data, in T max);
}

/* A checksum unit with per-packet state (not run by snic). */
extern Checksum<W> {
    Checksum(PNA_HashAlgorithm_t hash);
    void clear();
    void update<T>(in T data);
    W    get();
}

/* The ones' complement checksum of IPv4, TCP and UDP, incremental (RFC 1624). Its state is
 * per packet: it starts cleared for every packet. */
extern InternetChecksum {
    InternetChecksum();
    void clear();
    void add<T>(in T data);
    void subtract<T>(in T data);
    bit<16> get();
    bit<16> get_state();
    void set_state(in bit<16> checksum_state);
}

enum PNA_CounterType_t {
    PACKETS,
    BYTES,
    PACKETS_AND_BYTES
}

/* An array of n_counters counters, indexed by the program. */
extern Counter<W, S> {
    Counter(bit<32> n_counters, PNA_CounterType_t type);
    void count(in S index);
}

/* One counter per entry of the table whose `pna_direct_counter` names it. */
extern DirectCounter<W> {
    DirectCounter(PNA_CounterType_t type);
    void count();
}

enum PNA_MeterType_t {
    PACKETS,
    BYTES
}

enum PNA_MeterColor_t { RED, GREEN, YELLOW }

/* An array of two-rate three-colour meters (RFC 2698). snic runs the colour-blind execute
 * only; rates come from the control plane (meter_set_rates), an unconfigured meter is GREEN. */
extern Meter<S> {
    Meter(bit<32> n_meters, PNA_MeterType_t type);
    PNA_MeterColor_t execute(in S index, in PNA_MeterColor_t color);
    PNA_MeterColor_t execute(in S index);
}

/* One meter per entry of the table whose `pna_direct_meter` names it (colour-blind execute
 * only, in the entry's action). */
extern DirectMeter {
    DirectMeter(PNA_MeterType_t type);
    PNA_MeterColor_t execute(in PNA_MeterColor_t color);
    PNA_MeterColor_t execute();
}

/* An array of values the data plane reads and writes (cells start at zero). */
extern Register<T, S> {
    Register(bit<32> size);
    Register(bit<32> size, T initial_value);
    T    read  (in S index);
    void write (in S index, in T value);
}

/* A uniformly random value in [min, max] (bit<W> values; snic's generator is deterministic
 * per switch, as its v1model `random`). */
extern Random<T> {
    Random(T min, T max);
    T read();
}

/* Table implementations, named by the `pna_implementation` table property: entries name a
 * profile's members (or a selector's groups, a member chosen by a hash of the `selector` keys). */
extern ActionProfile {
    ActionProfile(bit<32> size);
}

extern ActionSelector {
    ActionSelector(PNA_HashAlgorithm_t algo, bit<32> size, bit<32> outputWidth);
}

/* A stream of data to the control plane (not run by snic in PNA programs). */
extern Digest<T> {
    Digest();
    void pack(in T data);
}

/* Which way a packet crosses the NIC. */
enum PNA_Direction_t {
    NET_TO_HOST,
    HOST_TO_NET
}

/* Where a packet came from. */
enum PNA_PacketPath_t {
    FROM_NET_PORT,
    FROM_NET_LOOPEDBACK,
    FROM_NET_RECIRCULATED,
    FROM_HOST,
    FROM_HOST_LOOPEDBACK,
    FROM_HOST_RECIRCULATED
}

/* What the pre control sees. */
struct pna_pre_input_metadata_t {
    PortId_t        input_port;
    ParserError_t   parser_error;
    PNA_Direction_t direction;
    PassNumber_t    pass;
    bool            loopedback;
}

/* What the pre control decides (inline decryption: snic ignores it). */
struct pna_pre_output_metadata_t {
    bool              decrypt;
    SecurityAssocId_t said;
    bit<16>           decrypt_start_offset;
}

/* What the main parser sees. */
struct pna_main_parser_input_metadata_t {
    PNA_Direction_t direction;
    PassNumber_t    pass;
    bool            loopedback;
    PortId_t        input_port;   /* a network port (NET_TO_HOST) or a host vport */
}

/* What the main control sees. */
struct pna_main_input_metadata_t {
    PNA_Direction_t  direction;
    PassNumber_t     pass;
    bool             loopedback;
    Timestamp_t      timestamp;
    ParserError_t    parser_error;
    ClassOfService_t class_of_service;
    PortId_t         input_port;
}

/* What the main control decides beside the forwarding functions. */
struct pna_main_output_metadata_t {
    ClassOfService_t class_of_service;
}

/* Forwarding: the last of these a packet's main control calls wins. Without any, the packet
 * is dropped. */
extern void drop_packet();
extern void send_to_port(PortId_t dest_port);

/* A copy of the packet to a mirror session (not run by snic). */
extern void mirror_packet(MirrorSlotId_t mirror_slot_id, MirrorSessionId_t mirror_session_id);

/* After the main control: the deparsed packet goes back to the main parser, `pass` one more
 * (at most 7 times: then it is dropped); the forwarding calls of this pass are ignored. */
extern void recirculate();

/* In the default action of a table with `add_on_miss = true`: add an entry keyed by the
 * table's current key values, running action_name with action_params (a list or struct of the
 * action's directionless parameters), expiring per expire_time_profile_id. False when the
 * table is full. */
extern bool add_entry<T>(string action_name,
                         in T action_params,
                         in ExpireTimeProfileId_t expire_time_profile_id);

/* A new flow id (not run by snic). */
extern FlowId_t allocate_flow_id();

/* In an action of a hit entry of a table with `pna_idle_timeout`: the entry now expires after
 * the time of profile expire_time_profile_id, counted from now. */
extern void set_entry_expire_time(in ExpireTimeProfileId_t expire_time_profile_id);

/* In an action of a hit entry of a table with `pna_idle_timeout`: the entry's idle time
 * starts again from now. (A hit alone does not restart it in snic's PNA, as in the DPDK
 * target; in v1model tables with `support_timeout`, every hit does, as in BMv2.) */
extern void restart_expire_timer();

/* n2h_value for NET_TO_HOST, h2n_value for HOST_TO_NET. */
@pure
extern T SelectByDirection<T>(in PNA_Direction_t direction, in T n2h_value, in T h2n_value);

/* The blocks, in the order a packet meets them. */
control PreControlT<PH, PM>(
    in    PH pre_hdr,
    inout PM pre_user_meta,
    in    pna_pre_input_metadata_t  istd,
    inout pna_pre_output_metadata_t ostd);

parser MainParserT<MH, MM>(
    packet_in pkt,
    out   MH main_hdr,
    inout MM main_user_meta,
    in    pna_main_parser_input_metadata_t istd);

control MainControlT<MH, MM>(
    inout MH main_hdr,
    inout MM main_user_meta,
    in    pna_main_input_metadata_t  istd,
    inout pna_main_output_metadata_t ostd);

control MainDeparserT<MH, MM>(
    packet_out pkt,
    in    MH main_hdr,
    in    MM main_user_meta,
    in    pna_main_output_metadata_t ostd);

/* snic runs the pre control on the main parser's headers and metadata: PH and PM must be MH
 * and MM. */
package PNA_NIC<PH, PM, MH, MM>(
    MainParserT<MH, MM> main_parser,
    PreControlT<PH, PM> pre_control,
    MainControlT<MH, MM> main_control,
    MainDeparserT<MH, MM> main_deparser);

#endif  /* __PNA_P4__ */
