//! Loading ELF objects produced by `clang -O2 -target bpf`: programs (one per section or
//! function), their maps (legacy `maps` section and BTF-defined `.maps`), global data
//! (`.data`, `.rodata`, `.bss` as single-entry array maps with their initial contents),
//! relocations, bpf-to-bpf calls. PREVAIL's ELF reader does the parsing and relocation, so
//! the instructions snic verifies are byte for byte the instructions it runs.
//!
//! After loading, every `lddw` that names a map has `src` = [`pseudo::MAP_FD`] or
//! [`pseudo::MAP_VALUE`] and `imm` = the map's index in [`Object::maps`] (not a file
//! descriptor): the runtime and the kernel oracle both bind indexes to their own maps.

use crate::insn::{Insn, pseudo};
use crate::platform::{SnicPlatform, is_nic_core_section};
use object::{Object as _, ObjectSection as _};
use prevail::spec::config::EbpfVerifierOptions;
use prevail::spec::type_descriptors::RawProgram;
use std::fmt;

/// Linux map types snic knows (`enum bpf_map_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MapKind {
    /// `BPF_MAP_TYPE_HASH`.
    Hash,
    /// `BPF_MAP_TYPE_ARRAY` (also global data sections).
    Array,
    /// `BPF_MAP_TYPE_PERCPU_ARRAY`: one value per worker in snic.
    PerCpuArray,
    /// `BPF_MAP_TYPE_PERCPU_HASH`: one value per worker in snic.
    PerCpuHash,
    /// `BPF_MAP_TYPE_LRU_HASH`.
    LruHash,
    /// `BPF_MAP_TYPE_LPM_TRIE`.
    LpmTrie,
    /// `BPF_MAP_TYPE_DEVMAP`: index -> snic port.
    DevMap,
    /// `BPF_MAP_TYPE_DEVMAP_HASH`: key -> snic port.
    DevMapHash,
    /// `BPF_MAP_TYPE_RINGBUF`.
    RingBuf,
    /// Any other type: loading refuses it with [`LoadError::UnsupportedMap`].
    Other(u32),
}

impl MapKind {
    /// From the kernel's `bpf_map_type` number.
    pub fn from_linux(t: u32) -> MapKind {
        match t {
            1 => MapKind::Hash,
            2 => MapKind::Array,
            5 => MapKind::PerCpuHash,
            6 => MapKind::PerCpuArray,
            9 => MapKind::LruHash,
            11 => MapKind::LpmTrie,
            14 => MapKind::DevMap,
            25 => MapKind::DevMapHash,
            27 => MapKind::RingBuf,
            t => MapKind::Other(t),
        }
    }

    /// The kernel's `bpf_map_type` number.
    pub fn linux_type(self) -> u32 {
        match self {
            MapKind::Hash => 1,
            MapKind::Array => 2,
            MapKind::PerCpuHash => 5,
            MapKind::PerCpuArray => 6,
            MapKind::LruHash => 9,
            MapKind::LpmTrie => 11,
            MapKind::DevMap => 14,
            MapKind::DevMapHash => 25,
            MapKind::RingBuf => 27,
            MapKind::Other(t) => t,
        }
    }

    /// Short name (`hash`, `array`, `lru_hash`, ...), as `snic ebpf map` prints it.
    pub fn name(self) -> &'static str {
        match self {
            MapKind::Hash => "hash",
            MapKind::Array => "array",
            MapKind::PerCpuArray => "percpu_array",
            MapKind::PerCpuHash => "percpu_hash",
            MapKind::LruHash => "lru_hash",
            MapKind::LpmTrie => "lpm_trie",
            MapKind::DevMap => "devmap",
            MapKind::DevMapHash => "devmap_hash",
            MapKind::RingBuf => "ringbuf",
            MapKind::Other(_) => "other",
        }
    }
}

/// One map an object declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapSpec {
    /// Name (the C variable, or `.rodata`, `.data`, `.bss` for global data).
    pub name: String,
    /// Type.
    pub kind: MapKind,
    /// Key size in bytes.
    pub key_size: u32,
    /// Value size in bytes.
    pub value_size: u32,
    /// Maximum entries (ring buffer: its size in bytes).
    pub max_entries: u32,
    /// Initial contents of value 0, for global data sections (`.bss`: zeros).
    pub data: Option<Vec<u8>>,
    /// Read-only to programs (`.rodata`).
    pub readonly: bool,
}

/// Kind of program, from its section name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgKind {
    /// `SEC("xdp")` and `SEC("xdp/...")`: runs on packets.
    Xdp,
    /// `SEC("snic/core")`: lookaside work on the NIC core.
    NicCore,
    /// Anything else (loading keeps it, running refuses it).
    Other,
}

/// One program of an object.
#[derive(Clone, Debug)]
pub struct Program {
    /// ELF section (`xdp`, `snic/core`, ...).
    pub section: String,
    /// Function name.
    pub name: String,
    /// Kind, from the section.
    pub kind: ProgKind,
    /// Instructions, relocated: map references are indexes into [`Object::maps`], local
    /// calls are linked.
    pub insns: Vec<Insn>,
    /// Indexes into [`Object::maps`] of the maps this program uses.
    pub maps: Vec<usize>,
    /// PREVAIL's form, for the verifier.
    pub(crate) raw: RawProgram,
}

/// A loaded ELF object.
#[derive(Clone, Debug)]
pub struct Object {
    /// Every program, in section order.
    pub programs: Vec<Program>,
    /// Every map any program uses.
    pub maps: Vec<MapSpec>,
    /// Licence string (`license` section), if any.
    pub license: Option<String>,
}

/// Why an object did not load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadError {
    /// Not an ELF object PREVAIL's reader accepts (with its explanation).
    Elf(String),
    /// The object has no program (or none in the asked section / with the asked name).
    NoProgram(String),
    /// A map of a type snic does not implement.
    UnsupportedMap {
        /// Map name.
        name: String,
        /// Its `bpf_map_type`.
        linux_type: u32,
    },
    /// An instruction names a map the object does not declare.
    BadMapReference {
        /// Program.
        program: String,
        /// Instruction index.
        insn: usize,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Elf(e) => write!(f, "not a loadable BPF object: {e}"),
            LoadError::NoProgram(what) => write!(f, "no program {what}"),
            LoadError::UnsupportedMap { name, linux_type } => {
                write!(f, "map {name:?} has type {linux_type}, which snic does not implement")
            }
            LoadError::BadMapReference { program, insn } => {
                write!(f, "{program}: instruction {insn} names a map the object does not declare")
            }
        }
    }
}

impl std::error::Error for LoadError {}

impl Object {
    /// Parses an ELF object. `name` is used in messages (a path, usually).
    pub fn parse(bytes: &[u8], name: &str) -> Result<Object, LoadError> {
        let mut platform = SnicPlatform::default();
        let options = verifier_options();
        // PREVAIL's reader can panic on some malformed inputs; a bad file must be an error.
        let raws = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            prevail::elf_loader::read_elf(bytes, name, "", "", &options, &mut platform)
        }))
        .map_err(|_| LoadError::Elf("the ELF reader could not process this file".into()))?
        .map_err(|e| LoadError::Elf(e.0))?;
        if raws.is_empty() {
            return Err(LoadError::NoProgram(format!("in {name}")));
        }
        let sections = section_contents(bytes);
        let mut maps: Vec<MapSpec> = Vec::new();
        let mut fd_to_index: Vec<(i32, usize)> = Vec::new();
        let mut programs = Vec::new();
        for raw in raws {
            let mut used = Vec::new();
            for d in &raw.info.map_descriptors {
                if fd_to_index.iter().any(|&(fd, _)| fd == d.original_fd) {
                    continue;
                }
                // PREVAIL's reader may describe one global data section (or map) more than
                // once; names are unique in an ELF object, so they name one map.
                if let Some(i) = maps.iter().position(|m| m.name == d.name) {
                    fd_to_index.push((d.original_fd, i));
                    continue;
                }
                let global = d.name.starts_with('.');
                // PREVAIL's reader gives global-data sections map type 0 (unspecified); they
                // are single-entry arrays, as libbpf and the kernel treat them.
                let kind = if global { MapKind::Array } else { MapKind::from_linux(d.map_type) };
                let data = if global {
                    let contents = sections
                        .iter()
                        .find(|(n, _)| *n == d.name)
                        .map(|(_, c)| c.clone())
                        .unwrap_or_default();
                    let mut v = contents;
                    v.resize(d.value_size as usize, 0);
                    Some(v)
                } else {
                    None
                };
                maps.push(MapSpec {
                    name: d.name.clone(),
                    kind,
                    key_size: d.key_size,
                    value_size: d.value_size,
                    max_entries: d.max_entries,
                    data,
                    readonly: d.name.starts_with(".rodata"),
                });
                fd_to_index.push((d.original_fd, maps.len() - 1));
            }
            let mut insns: Vec<Insn> = raw
                .prog
                .iter()
                .map(|i| Insn {
                    code: i.opcode,
                    dst: i.dst_src & 0x0f,
                    src: i.dst_src >> 4,
                    off: i.offset,
                    imm: i.imm,
                })
                .collect();
            let pname = format!("{}/{}", raw.section_name, raw.function_name);
            for (pc, insn) in insns.iter_mut().enumerate() {
                let is_lddw = insn.code == 0x18;
                if is_lddw && (insn.src == pseudo::MAP_FD || insn.src == pseudo::MAP_VALUE) {
                    let index = fd_to_index
                        .iter()
                        .find(|&&(fd, _)| fd == insn.imm)
                        .map(|&(_, i)| i)
                        .ok_or(LoadError::BadMapReference { program: pname.clone(), insn: pc })?;
                    insn.imm = index as i32;
                    if !used.contains(&index) {
                        used.push(index);
                    }
                }
            }
            for &i in &used {
                if let MapKind::Other(t) = maps[i].kind {
                    return Err(LoadError::UnsupportedMap {
                        name: maps[i].name.clone(),
                        linux_type: t,
                    });
                }
            }
            let kind = if is_nic_core_section(&raw.section_name) {
                ProgKind::NicCore
            } else if raw.section_name == "xdp"
                || raw.section_name.starts_with("xdp/")
                || raw.section_name.starts_with("xdp.")
            {
                ProgKind::Xdp
            } else {
                ProgKind::Other
            };
            programs.push(Program {
                section: raw.section_name.clone(),
                name: raw.function_name.clone(),
                kind,
                insns,
                maps: used,
                raw,
            });
        }
        let license = sections
            .iter()
            .find(|(n, _)| n == "license")
            .map(|(_, c)| String::from_utf8_lossy(c).trim_end_matches('\0').to_string());
        Ok(Object { programs, maps, license })
    }

    /// The program in `section` (and with function `name` when given); with neither, the
    /// object's only XDP or NIC-core program, or its first program.
    pub fn program(
        &self,
        section: Option<&str>,
        name: Option<&str>,
    ) -> Result<&Program, LoadError> {
        let found = match (section, name) {
            (None, None) => {
                self.programs.iter().find(|p| p.kind != ProgKind::Other).or(self.programs.first())
            }
            _ => self.programs.iter().find(|p| {
                section.is_none_or(|s| p.section == s) && name.is_none_or(|n| p.name == n)
            }),
        };
        found.ok_or_else(|| {
            LoadError::NoProgram(format!(
                "{}{} (the object has: {})",
                section.map(|s| format!("in section {s:?}")).unwrap_or_default(),
                name.map(|n| format!(" named {n:?}")).unwrap_or_default(),
                self.programs
                    .iter()
                    .map(|p| format!("{}/{}", p.section, p.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
    }
}

/// The verifier options snic uses everywhere (termination checked, as the kernel does).
pub(crate) fn verifier_options() -> EbpfVerifierOptions {
    // `mock_map_fds`: otherwise PREVAIL's reader creates a real kernel map
    // (bpf(BPF_MAP_CREATE)) for every legacy `maps` section entry, leaks its fd, and exits the
    // process when the kernel refuses one. snic binds maps itself; the loader only needs
    // distinct placeholders.
    let mut o = EbpfVerifierOptions { mock_map_fds: true, ..EbpfVerifierOptions::default() };
    o.verbosity_opts.print_failures = true;
    o.runtime.check_for_termination = true;
    o.runtime.allow_division_by_zero = true;
    o
}

/// `(name, contents)` of every section, for global data and the licence.
fn section_contents(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let Ok(file) = object::File::parse(bytes) else {
        return Vec::new();
    };
    file.sections()
        .filter_map(|s| {
            let name = s.name().ok()?.to_string();
            let data = s.data().ok()?.to_vec();
            Some((name, data))
        })
        .collect()
}
