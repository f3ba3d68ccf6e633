//! The `kernel` operation: a lookaside kernel of the NIC's registry run over its memory, its
//! arguments mapped from the scenario's `args` (the table is in the module docs of
//! [`crate::hosts`]).

use super::{Hosts, Resolved};
use snic_compute::{Invocation, KernelCmd, dtype, ids, reduce, status};
use snic_testbed::Testbed;
use snic_time::Instant;
use std::collections::BTreeMap;

type Args = BTreeMap<String, serde_json::Value>;

fn num(args: &Args, key: &str) -> Result<Option<u64>, String> {
    match args.get(key) {
        None => Ok(None),
        Some(serde_json::Value::Number(n)) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("argument {key}: {n} is not a non-negative integer")),
        Some(serde_json::Value::String(s)) => {
            super::util::parse_num(s).map(Some).map_err(|e| format!("argument {key}: {e}"))
        }
        Some(v) => Err(format!("argument {key}: {v} is not a number")),
    }
}

/// Bytes of `n` elements of type `dt`.
fn elems(n: u64, dt: u64) -> Result<u64, String> {
    n.checked_mul(dtype::size(dt).unwrap_or(1) as u64)
        .ok_or_else(|| format!("argument n: {n} elements are too many"))
}

fn need(args: &Args, key: &str) -> Result<u64, String> {
    num(args, key)?.ok_or_else(|| format!("argument {key} is missing"))
}

fn dtype_arg(args: &Args) -> Result<u64, String> {
    let v = args.get("dtype").ok_or("argument dtype is missing")?;
    let name = v.as_str().ok_or_else(|| format!("argument dtype: {v} is not a type name"))?;
    (0..=dtype::F64).find(|&c| dtype::name(c) == Some(name)).ok_or_else(|| {
        format!("argument dtype: {name:?} is not i8, f32, i32, u32, i64, u64 or f64")
    })
}

/// A scalar given as a number of the dtype (`alpha`, `beta`): its bits, f32 in the low half.
fn typed(args: &Args, key: &str, dt: u64, default: f64) -> Result<u64, String> {
    let v = match args.get(key) {
        None => serde_json::Value::from(default),
        Some(v) => v.clone(),
    };
    let err = || format!("argument {key}: {v} is not a {}", dtype::name(dt).unwrap_or("?"));
    Ok(match dt {
        dtype::F32 => u64::from((v.as_f64().ok_or_else(err)? as f32).to_bits()),
        dtype::F64 => v.as_f64().ok_or_else(err)?.to_bits(),
        _ => match v.as_i64() {
            Some(i) => i as u64,
            None => v.as_u64().ok_or_else(err)?,
        },
    })
}

impl Hosts {
    /// A buffer argument: its address and length (the length written, else `want` when
    /// given, else the rest of the region). `want` past the buffer is an error (a kernel run
    /// over fewer elements than asked would pass for one that did the work) unless
    /// `self_checking`: the kernel gets the sizes too and checks them (GEMM).
    fn kbuf(
        &self,
        args: &Args,
        key: &str,
        nic: &str,
        want: Option<u64>,
        self_checking: bool,
    ) -> Result<(u64, u64), String> {
        let v = args.get(key).ok_or_else(|| format!("argument {key} (a buffer) is missing"))?;
        let s = v.as_str().ok_or_else(|| format!("argument {key}: {v} is not a buffer"))?;
        let node = self.nics.get(nic).map(|e| e.node);
        let r: Resolved = self.resolve(s, None, node)?;
        if r.node != node {
            return Err(format!("argument {key}: {s:?} is not in NIC {nic}'s memory"));
        }
        let len = match want {
            Some(w) if w > r.len && self_checking => r.len,
            Some(w) if w > r.len => {
                return Err(format!(
                    "argument {key}: {s:?} has {} bytes, the other arguments need {w}",
                    r.len
                ));
            }
            Some(w) if !r.explicit => w,
            _ => r.len,
        };
        Ok((r.addr, len))
    }

    /// The command for kernel `id`.
    fn kernel_cmd(&self, id: u32, nic: &str, a: &Args) -> Result<KernelCmd, String> {
        let mut cmd = KernelCmd::new(id, 0);
        let push = |cmd: &mut KernelCmd, (addr, len): (u64, u64)| {
            cmd.try_addr(addr, len);
        };
        match id {
            ids::GEMM => {
                let (m, n, k) = (need(a, "m")?, need(a, "n")?, need(a, "k")?);
                let dt = dtype_arg(a)?;
                let es = dtype::size(dt).unwrap_or(1) as u64;
                push(
                    &mut cmd,
                    self.kbuf(a, "a", nic, m.checked_mul(k).and_then(|x| x.checked_mul(es)), true)?,
                );
                push(
                    &mut cmd,
                    self.kbuf(a, "b", nic, k.checked_mul(n).and_then(|x| x.checked_mul(es)), true)?,
                );
                push(
                    &mut cmd,
                    self.kbuf(a, "c", nic, m.checked_mul(n).and_then(|x| x.checked_mul(4)), true)?,
                );
                for s in [m, n, k, dt, num(a, "flags")?.unwrap_or(0)] {
                    cmd.try_scalar(s);
                }
            }
            ids::COPY => {
                let src = self.kbuf(a, "src", nic, num(a, "len")?, false)?;
                push(&mut cmd, src);
                push(&mut cmd, self.kbuf(a, "dst", nic, Some(src.1), false)?);
            }
            ids::VADD => {
                let dt = dtype_arg(a)?;
                let bytes = Some(elems(need(a, "n")?, dt)?);
                for key in ["x", "y", "out"] {
                    push(&mut cmd, self.kbuf(a, key, nic, bytes, false)?);
                }
                cmd.try_scalar(dt);
            }
            ids::VSCALE => {
                let dt = dtype_arg(a)?;
                let bytes = Some(elems(need(a, "n")?, dt)?);
                for key in ["x", "out"] {
                    push(&mut cmd, self.kbuf(a, key, nic, bytes, false)?);
                }
                for s in [dt, typed(a, "alpha", dt, 1.0)?, typed(a, "beta", dt, 0.0)?] {
                    cmd.try_scalar(s);
                }
            }
            ids::REDUCE => {
                let dt = dtype_arg(a)?;
                let bytes = Some(elems(need(a, "n")?, dt)?);
                push(&mut cmd, self.kbuf(a, "x", nic, bytes, false)?);
                let op = match a.get("op").and_then(|v| v.as_str()).unwrap_or("sum") {
                    "sum" => reduce::SUM,
                    "min" => reduce::MIN,
                    "max" => reduce::MAX,
                    o => return Err(format!("argument op: {o:?} is not sum, min or max")),
                };
                cmd.try_scalar(op);
                cmd.try_scalar(dt);
            }
            ids::CRC32C => {
                push(&mut cmd, self.kbuf(a, "data", nic, None, false)?);
                cmd.try_scalar(num(a, "init")?.unwrap_or(0));
            }
            ids::LZ4_COMPRESS | ids::LZ4_DECOMPRESS => {
                push(&mut cmd, self.kbuf(a, "src", nic, None, false)?);
                push(&mut cmd, self.kbuf(a, "dst", nic, None, false)?);
            }
            _ => return Err("the scenario format does not map arguments for this kernel".into()),
        }
        Ok(cmd)
    }

    pub(super) fn kernel(
        &mut self,
        tb: &mut Testbed,
        now: Instant,
        nic: &str,
        kernel: &str,
        args: &Args,
    ) -> Result<usize, String> {
        let eng = self.nics.get(nic).ok_or_else(|| format!("kernel {kernel}: no NIC {nic}"))?;
        let id = eng
            .kernels
            .by_name(kernel)
            .ok_or_else(|| format!("kernel {kernel}: NIC {nic} has no such kernel"))?;
        let node = eng.node;
        let cmd = self.kernel_cmd(id, nic, args).map_err(|e| format!("kernel {kernel}: {e}"))?;
        let d = tb
            .nic_mut(node)
            .ok_or_else(|| format!("kernel {kernel}: NIC {nic} is not in the testbed"))?;
        let eng = self.nics.get_mut(nic).ok_or("NIC vanished")?;
        let r = eng.kernels.try_run(d.rnic.mem_mut(), &Invocation::new(snic_dma::NIC_OWNER, &cmd));
        let op = self.new_op(0, now);
        if let Err(e) = r {
            self.ops[op].status =
                Some(Err(format!("kernel {kernel} on {nic}: {} ({e})", status::name(e.code()))));
        }
        Ok(op)
    }
}
