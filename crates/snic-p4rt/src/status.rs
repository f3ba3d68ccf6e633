//! gRPC status codes, the per-update errors of a Write, and how they travel: a failed Write is
//! `UNKNOWN` with a `google.rpc.Status` in the details holding one `p4.v1.Error` per update
//! (`OK` for the updates that succeeded), as the P4Runtime specification says.

use prost::Message;

use crate::proto::google::rpc::Status as RpcStatus;
use crate::proto::p4::v1 as p4;

/// The canonical gRPC codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum Code {
    /// Success.
    Ok = 0,
    /// Unknown (a Write batch with failed updates).
    Unknown = 2,
    /// A malformed request.
    InvalidArgument = 3,
    /// No such object.
    NotFound = 5,
    /// It exists already.
    AlreadyExists = 6,
    /// Not the primary client.
    PermissionDenied = 7,
    /// A table or queue is full.
    ResourceExhausted = 8,
    /// The state does not allow it (no pipeline yet).
    FailedPrecondition = 9,
    /// Not applied: another update of an atomic batch failed.
    Aborted = 10,
    /// A value out of its range.
    OutOfRange = 11,
    /// Not supported by snic.
    Unimplemented = 12,
    /// A bug.
    Internal = 13,
}

impl Code {
    /// As tonic's code.
    pub fn tonic(self) -> tonic::Code {
        tonic::Code::from_i32(self as i32)
    }
}

/// One failure: a code and an explanation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fail {
    /// The code.
    pub code: Code,
    /// What was wrong.
    pub message: String,
}

impl Fail {
    /// A failure.
    pub fn new(code: Code, message: impl Into<String>) -> Fail {
        Fail { code, message: message.into() }
    }

    /// As a gRPC status.
    pub fn status(&self) -> tonic::Status {
        tonic::Status::new(self.code.tonic(), self.message.clone())
    }
}

impl core::fmt::Display for Fail {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

impl From<snic_p4::v1model::RuntimeError> for Fail {
    fn from(e: snic_p4::v1model::RuntimeError) -> Fail {
        use snic_p4::v1model::RuntimeError as E;
        let code = match &e {
            E::NotFound(_) => Code::NotFound,
            E::Duplicate => Code::AlreadyExists,
            E::Full => Code::ResourceExhausted,
            E::Invalid(_) => Code::InvalidArgument,
            E::Const(_) => Code::PermissionDenied,
        };
        Fail::new(code, e.to_string())
    }
}

/// The status of a Write batch whose updates had `results` (at least one failed).
pub fn write_status(results: &[Result<(), Fail>]) -> tonic::Status {
    batch_status(results, "updates")
}

/// The status of a Read whose requested entities had `results` (at least one failed).
pub fn read_status(results: &[Result<(), Fail>]) -> tonic::Status {
    batch_status(results, "reads")
}

fn batch_status(results: &[Result<(), Fail>], what: &str) -> tonic::Status {
    let details = results
        .iter()
        .map(|r| {
            let e = match r {
                Ok(()) => p4::Error { canonical_code: Code::Ok as i32, ..Default::default() },
                Err(f) => p4::Error {
                    canonical_code: f.code as i32,
                    message: f.message.clone(),
                    ..Default::default()
                },
            };
            prost_types::Any {
                type_url: "type.googleapis.com/p4.v1.Error".into(),
                value: e.encode_to_vec(),
            }
        })
        .collect();
    let failed = results.iter().filter(|r| r.is_err()).count();
    let message = format!("{failed} of {} {what} failed", results.len());
    let st = RpcStatus { code: Code::Unknown as i32, message: message.clone(), details };
    tonic::Status::with_details(tonic::Code::Unknown, message, st.encode_to_vec().into())
}
