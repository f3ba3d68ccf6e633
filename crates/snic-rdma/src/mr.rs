//! Memory regions: keys, bounds, access flags, PD ownership, invalidation.
//!
//! A key is `index << 8 | tag`: the index finds the MR, the tag (different for lkey and rkey,
//! and changed on every registration in that slot) must match, so a stale or forged key with a
//! valid index still fails.

use crate::verbs::{Access, MrInfo, Pd};

/// Why an MR check failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MrFault {
    /// No live MR has this key.
    BadKey,
    /// The MR belongs to another PD.
    WrongPd,
    /// The range leaves the MR (or overflows).
    Bounds,
    /// A needed access flag is missing.
    Access,
    /// The MR was invalidated (SEND with invalidate).
    Invalidated,
}

#[derive(Debug, Clone, Copy)]
struct Mr {
    info: MrInfo,
    valid: bool,
}

/// The MR table of one NIC.
#[derive(Debug, Default)]
pub struct MrTable {
    slots: Vec<Option<Mr>>,
    free: Vec<u32>,
    generation: u8,
}

const MAX_MRS: usize = 1 << 24;

impl MrTable {
    /// Register `[addr, addr + len)` for `pd`. `None` when the table is full.
    pub fn reg(&mut self, pd: Pd, addr: u64, len: u64, access: Access) -> Option<MrInfo> {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                if self.slots.len() >= MAX_MRS {
                    return None;
                }
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        self.generation = self.generation.wrapping_add(2);
        // lkey tag even, rkey tag odd.
        let tag = self.generation & 0xfe;
        let info = MrInfo {
            lkey: (idx << 8) | u32::from(tag),
            rkey: (idx << 8) | u32::from(tag | 1),
            addr,
            len,
            access,
            pd,
        };
        self.slots[idx as usize] = Some(Mr { info, valid: true });
        Some(info)
    }

    fn slot(&self, key: u32) -> Option<&Mr> {
        self.slots.get((key >> 8) as usize)?.as_ref()
    }

    /// The MR with this lkey.
    pub fn by_lkey(&self, lkey: u32) -> Option<MrInfo> {
        self.slot(lkey).filter(|m| m.info.lkey == lkey).map(|m| m.info)
    }

    /// The MR with this rkey.
    pub fn by_rkey(&self, rkey: u32) -> Option<MrInfo> {
        self.slot(rkey).filter(|m| m.info.rkey == rkey).map(|m| m.info)
    }

    /// Deregister by lkey.
    pub fn dereg(&mut self, lkey: u32) -> Option<MrInfo> {
        let idx = (lkey >> 8) as usize;
        let m = self.slots.get(idx)?.as_ref()?;
        if m.info.lkey != lkey {
            return None;
        }
        let info = m.info;
        self.slots[idx] = None;
        self.free.push(idx as u32);
        Some(info)
    }

    /// Whether any MR belongs to `pd`.
    pub fn pd_in_use(&self, pd: Pd) -> bool {
        self.slots.iter().flatten().any(|m| m.info.pd == pd)
    }

    /// The checks every access makes, in IBTA order: live and valid MR, same PD, range inside
    /// it, access flags `need` (`Access::NONE` needs nothing).
    fn check(m: Option<&Mr>, pd: Pd, addr: u64, len: u64, need: Access) -> Result<(), MrFault> {
        let m = m.ok_or(MrFault::BadKey)?;
        if !m.valid {
            return Err(MrFault::Invalidated);
        }
        if m.info.pd != pd {
            return Err(MrFault::WrongPd);
        }
        let inside = addr >= m.info.addr
            && addr.checked_add(len).is_some_and(|e| e <= m.info.addr.saturating_add(m.info.len));
        if !inside {
            return Err(MrFault::Bounds);
        }
        if !m.info.access.contains(need) {
            return Err(MrFault::Access);
        }
        Ok(())
    }

    /// Check a local access through `lkey` (`write`: the NIC writes there, which needs
    /// LOCAL_WRITE).
    pub fn check_local(
        &self,
        lkey: u32,
        pd: Pd,
        addr: u64,
        len: u64,
        write: bool,
    ) -> Result<(), MrFault> {
        let m = self.slot(lkey).filter(|m| m.info.lkey == lkey);
        let need = if write { Access::LOCAL_WRITE } else { Access::NONE };
        Self::check(m, pd, addr, len, need)
    }

    /// Check a remote access through `rkey` needing `need` (REMOTE_WRITE / READ / ATOMIC).
    pub fn check_remote(
        &self,
        rkey: u32,
        pd: Pd,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<(), MrFault> {
        Self::check(self.slot(rkey).filter(|m| m.info.rkey == rkey), pd, addr, len, need)
    }

    /// Invalidate the MR with `rkey` (SEND with invalidate). It must belong to `pd`.
    pub fn invalidate(&mut self, rkey: u32, pd: Pd) -> Result<(), MrFault> {
        let idx = (rkey >> 8) as usize;
        let m = self.slots.get_mut(idx).and_then(|s| s.as_mut()).filter(|m| m.info.rkey == rkey);
        let m = m.ok_or(MrFault::BadKey)?;
        if m.info.pd != pd {
            return Err(MrFault::WrongPd);
        }
        if !m.valid {
            return Err(MrFault::Invalidated);
        }
        m.valid = false;
        Ok(())
    }

    /// The key generation (the tag of the last registration).
    pub(crate) fn generation(&self) -> u8 {
        self.generation
    }

    /// Set the key generation (an imported table goes on from the exporter's).
    pub(crate) fn set_generation(&mut self, g: u8) {
        self.generation = g;
    }

    /// Every registered MR and whether it is valid.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (MrInfo, bool)> + '_ {
        self.slots.iter().flatten().map(|m| (m.info, m.valid))
    }

    /// Whether the slot `key` indexes holds an MR.
    pub(crate) fn slot_taken(&self, key: u32) -> bool {
        matches!(self.slots.get((key >> 8) as usize), Some(Some(_)))
    }

    /// Put an MR with given keys back in its slot (import; the slot was checked free).
    pub(crate) fn insert(&mut self, info: MrInfo, valid: bool) {
        let idx = (info.lkey >> 8) as usize;
        if idx >= MAX_MRS {
            return;
        }
        if self.slots.len() <= idx {
            self.slots.resize(idx + 1, None);
        }
        self.slots[idx] = Some(Mr { info, valid });
        let slots = &self.slots;
        self.free =
            (0..slots.len() as u32).rev().filter(|&i| slots[i as usize].is_none()).collect();
    }

    /// Make an invalidated MR valid again (the fast-register step of a real NIC).
    pub fn revalidate(&mut self, lkey: u32) -> Result<(), MrFault> {
        let idx = (lkey >> 8) as usize;
        let m = self.slots.get_mut(idx).and_then(|s| s.as_mut()).filter(|m| m.info.lkey == lkey);
        m.ok_or(MrFault::BadKey)?.valid = true;
        Ok(())
    }
}
