//! Fuzz target `p4rt_messages`: arbitrary bytes decoded as P4Runtime messages (a
//! `WriteRequest`, a `ReadRequest` or a `PacketOut`, chosen by the first byte) and handed to
//! the P4Runtime device with snic-p4rt's test program committed, as the gRPC service would.
//!
//! Checks, besides "never panics": a Write that fails with a single per-update error leaves
//! every table as it was (a one-update batch is all or nothing); the device's tables read
//! the same before and after a Read.

#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use prost::Message;
use snic_io::p4::P4Program;
use snic_p4rt::device::Device;
use snic_p4rt::proto::p4::v1 as p4;
use snic_p4rt::testing::{TEST_PROGRAM, config, eid};

/// The test program's config (compiled and described once per process).
fn cfg() -> &'static p4::ForwardingPipelineConfig {
    static C: OnceLock<p4::ForwardingPipelineConfig> = OnceLock::new();
    C.get_or_init(|| config(TEST_PROGRAM))
}

fn device() -> Device {
    let prog = P4Program::load(Path::new(""), None, &[], 1).expect("empty program");
    let mut dev = Device::new(1, prog.control(), Vec::new());
    let arb =
        p4::MasterArbitrationUpdate { device_id: 1, election_id: eid(1), ..Default::default() };
    dev.arbitrate(1, &arb).expect("primary");
    let req = p4::SetForwardingPipelineConfigRequest {
        device_id: 1,
        election_id: eid(1),
        action: 3,
        config: Some(cfg().clone()),
        ..Default::default()
    };
    dev.set_pipeline(&req).expect("pipeline");
    dev
}

fn tables(dev: &Device) -> Vec<p4::Entity> {
    let q = p4::Entity { entity: Some(p4::entity::Entity::TableEntry(p4::TableEntry::default())) };
    dev.read(&p4::ReadRequest { device_id: 1, entities: vec![q], ..Default::default() })
        .expect("wildcard read")
}

fuzz_target!(|data: &[u8]| {
    let Some((kind, rest)) = data.split_first() else { return };
    // A fresh device per input keeps each input self-contained (the program compiles in
    // about a millisecond).
    let mut dev = device();
    match kind % 3 {
        0 => {
            let Ok(mut req) = p4::WriteRequest::decode(rest) else { return };
            req.device_id = 1;
            req.election_id = eid(1);
            let before = tables(&dev);
            if let Err(Ok(results)) = dev.write(&req)
                && results.len() == 1
            {
                assert_eq!(before, tables(&dev), "a failed single update changed a table");
            }
        }
        1 => {
            let Ok(mut req) = p4::ReadRequest::decode(rest) else { return };
            req.device_id = 1;
            let before = tables(&dev);
            let _ = dev.read(&req);
            assert_eq!(before, tables(&dev));
        }
        _ => {
            let Ok(po) = p4::PacketOut::decode(rest) else { return };
            let _ = dev.packet_out_frame(&po);
        }
    }
});
