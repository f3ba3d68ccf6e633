//! Loads and verifies every program of an object: `cargo run -p snic-ebpf --example ebpf-verify -- FILE.o`.
fn main() {
    for path in std::env::args().skip(1) {
        let bytes = std::fs::read(&path).expect("read");
        match snic_ebpf::Object::parse(&bytes, &path) {
            Err(e) => println!("{path}: {e}"),
            Ok(obj) => {
                for m in &obj.maps {
                    println!("  map {:?}", m);
                }
                for p in &obj.programs {
                    println!(
                        "{path} {}/{} {:?} {} insns maps {:?}",
                        p.section,
                        p.name,
                        p.kind,
                        p.insns.len(),
                        p.maps
                    );
                    for (i, insn) in p.insns.iter().enumerate().filter(|(_, i)| i.code == 0x18) {
                        println!("    lddw at {i}: {insn:?}");
                    }
                    match snic_ebpf::verify(p) {
                        Ok(v) => println!("  PASS {v:?}"),
                        Err(r) => println!("  FAIL {r}"),
                    }
                }
            }
        }
    }
}
