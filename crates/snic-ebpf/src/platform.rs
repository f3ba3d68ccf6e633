//! The verifier's view of snic: Linux's program types, helpers and maps (PREVAIL's
//! `LinuxPlatform`), plus snic's own NIC-core program type.
//!
//! Everything is delegated to [`LinuxPlatform`] except the section names of NIC-core programs
//! ([`NIC_CORE_SECTION`]), which get snic's own context descriptor ([`NIC_CORE_CTX`]).

use prevail::elf_loader::UnmarshalError;
use prevail::linux::linux_platform::LinuxPlatform;
use prevail::linux::spec_prototypes::HelperPrototype;
use prevail::platform::EbpfPlatform;
use prevail::spec::config::EbpfVerifierOptions;
use prevail::spec::ebpf_base::EbpfCtxDescriptor;
use prevail::spec::ebpf_base::{EbpfArgumentType, EbpfReturnType};
use prevail::spec::type_descriptors::{EbpfMapDescriptor, EbpfMapType, EbpfProgramType};

/// Section prefix of NIC-core (lookaside) programs: `SEC("snic/core")`, `SEC("snic/core/NAME")`.
pub const NIC_CORE_SECTION: &str = "snic/core";

/// The NIC-core program's context (`struct snic_core_md` in `examples/ebpf/snic_core.h`):
/// `data`/`data_end` (u32 at 0 and 4) bound argument 0, as XDP's bound the packet.
pub static NIC_CORE_CTX: EbpfCtxDescriptor =
    EbpfCtxDescriptor { size: 112, data: 0, end: 4, meta: -1 };

/// `snic_arg_read(u32 arg, u32 offset, void *dst, u32 len)`: copies from a NIC-core address
/// argument (helper [`crate::core::HELPER_ARG_READ`]). `dst` is written in full on every path.
pub static SNIC_ARG_READ: HelperPrototype = HelperPrototype {
    name: "snic_arg_read",
    return_type: EbpfReturnType::Integer,
    argument_type: [
        EbpfArgumentType::Anything,
        EbpfArgumentType::Anything,
        EbpfArgumentType::PtrToWritableMem,
        EbpfArgumentType::ConstSizeOrZero,
        EbpfArgumentType::DontCare,
    ],
    reallocate_packet: false,
    ctx_descriptor: None,
    unsupported: false,
    might_sleep: false,
    zero_args_mask: 0,
    allowed_map_types: 0,
};

/// `snic_arg_write(u32 arg, u32 offset, const void *src, u32 len)`: copies to a NIC-core
/// address argument (helper [`crate::core::HELPER_ARG_WRITE`]).
pub static SNIC_ARG_WRITE: HelperPrototype = HelperPrototype {
    name: "snic_arg_write",
    return_type: EbpfReturnType::Integer,
    argument_type: [
        EbpfArgumentType::Anything,
        EbpfArgumentType::Anything,
        EbpfArgumentType::PtrToReadableMem,
        EbpfArgumentType::ConstSizeOrZero,
        EbpfArgumentType::DontCare,
    ],
    reallocate_packet: false,
    ctx_descriptor: None,
    unsupported: false,
    might_sleep: false,
    zero_args_mask: 0,
    allowed_map_types: 0,
};

/// snic's own helper prototypes (NIC-core programs only).
fn snic_helper(n: i32) -> Option<&'static HelperPrototype> {
    match u32::try_from(n).ok()? {
        crate::core::HELPER_ARG_READ => Some(&SNIC_ARG_READ),
        crate::core::HELPER_ARG_WRITE => Some(&SNIC_ARG_WRITE),
        _ => None,
    }
}

/// PREVAIL's Linux platform with snic's NIC-core program type added.
pub struct SnicPlatform {
    /// The Linux platform everything else is delegated to.
    pub linux: LinuxPlatform,
    /// The program being analysed is a NIC-core program (snic's helpers are usable).
    core: bool,
}

impl std::fmt::Debug for SnicPlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnicPlatform").finish_non_exhaustive()
    }
}

impl Default for SnicPlatform {
    fn default() -> Self {
        SnicPlatform { linux: LinuxPlatform::new(), core: false }
    }
}

impl SnicPlatform {
    /// Points the platform at one program before its analysis (maps and program type).
    pub fn prepare(&mut self, info: &prevail::spec::type_descriptors::ProgramInfo) {
        self.linux.map_descriptors = info.map_descriptors.clone();
        self.linux.set_program_type(&info.program_type);
        self.core = info.program_type.name == "snic_core";
    }
}

/// Whether a section holds a NIC-core program.
pub fn is_nic_core_section(section: &str) -> bool {
    section == NIC_CORE_SECTION || section.starts_with("snic/core/")
}

impl EbpfPlatform for SnicPlatform {
    fn get_program_type(&self, section: &str, path: &str) -> EbpfProgramType {
        if is_nic_core_section(section) {
            return EbpfProgramType {
                name: "snic_core".to_string(),
                ctx_descriptor: Some(&NIC_CORE_CTX),
                platform_specific_data: 0,
                section_prefixes: vec![NIC_CORE_SECTION.to_string()],
                is_privileged: false,
                is_sleepable: false,
            };
        }
        self.linux.get_program_type(section, path)
    }
    fn get_helper_prototype(&self, n: i32) -> &HelperPrototype {
        match snic_helper(n) {
            Some(p) => p,
            None => self.linux.get_helper_prototype(n),
        }
    }
    fn try_get_helper_prototype(&self, n: i32) -> Option<&HelperPrototype> {
        snic_helper(n).or_else(|| self.linux.try_get_helper_prototype(n))
    }
    fn is_helper_usable(&self, n: i32) -> bool {
        if snic_helper(n).is_some() {
            return self.core;
        }
        self.linux.is_helper_usable(n)
    }
    fn map_record_size(&self) -> usize {
        self.linux.map_record_size()
    }
    fn parse_maps_section(
        &mut self,
        descriptors: &mut Vec<EbpfMapDescriptor>,
        data: &[u8],
        record_size: usize,
        count: usize,
        options: &EbpfVerifierOptions,
    ) {
        self.linux.parse_maps_section(descriptors, data, record_size, count, options)
    }
    fn resolve_inner_map_references(
        &self,
        descriptors: &mut Vec<EbpfMapDescriptor>,
    ) -> Result<(), UnmarshalError> {
        self.linux.resolve_inner_map_references(descriptors)
    }
    fn get_map_descriptor(&self, map_fd: i32) -> Option<&EbpfMapDescriptor> {
        self.linux.get_map_descriptor(map_fd)
    }
    fn get_map_type(&self, platform_specific_type: u32) -> EbpfMapType {
        self.linux.get_map_type(platform_specific_type)
    }
    fn supported_conformance_groups(&self) -> u32 {
        self.linux.supported_conformance_groups()
    }
}
