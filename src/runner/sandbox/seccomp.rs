//! The system calls a sandboxed tool may not make (docs/SECURITY.md,
//! "What the sandbox does not do"): a seccomp filter bubblewrap loads
//! just before it starts the tool, for the tool and everything it starts.
//!
//! The firewall sees IP only, so a socket of any other family (vsock to
//! the hypervisor's services, AF_ALG's kernel crypto, protocols the kernel
//! loads on demand: RDS, TIPC) is refused: a tool gets unix, IPv4, IPv6
//! and netlink sockets (name and route lookups). And a few calls that
//! expose much of the kernel to an unprivileged process and that no tool
//! needs: io_uring, eBPF, perf events, userfaultfd and the kernel's
//! keyrings. A refused call fails with an error (`EAFNOSUPPORT`, `EPERM`),
//! it does not kill the tool. Calls of another ABI than the runner's own
//! (i386 through `int 0x80`, x32) fail with `ENOSYS`.
//!
//! The filter is classic BPF over `struct seccomp_data`, built here for
//! x86-64 and aarch64; elsewhere tools run without one (said at start).

/// What the supervisor replaces with the descriptor it loads the filter
/// into, in bubblewrap's `--seccomp` argument.
pub const FD_ARG: &str = "@execplane-seccomp-fd";

/// `struct seccomp_data`: the call's number, then its ABI, then (after
/// the instruction pointer) its arguments, 8 bytes each.
const NR: u32 = 0;
const ARCH: u32 = 4;
/// The first argument's low 32 bits (little-endian; both ABIs here are).
const ARG0: u32 = 16;

const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;

const ALLOW: u32 = 0x7fff_0000;
const ERRNO: u32 = 0x0005_0000;
const EPERM: u32 = 1;
const ENOSYS: u32 = 38;
const EAFNOSUPPORT: u32 = 97;

/// Socket families a tool may open: unix, IPv4, IPv6, netlink.
const FAMILIES: [u32; 4] = [1, 2, 10, 16];

/// The ABI's audit number, its `socket` and `socketpair` calls and the
/// calls refused.
#[cfg(target_arch = "x86_64")]
const ABI: Option<(u32, [u32; 2], &[u32])> = Some((
    0xc000_003e,
    [41, 53],
    // io_uring_setup, _enter, _register; bpf; perf_event_open;
    // userfaultfd; add_key, request_key, keyctl.
    &[425, 426, 427, 321, 298, 323, 248, 249, 250],
));
#[cfg(target_arch = "aarch64")]
const ABI: Option<(u32, [u32; 2], &[u32])> = Some((
    0xc000_00b7,
    [198, 199],
    &[425, 426, 427, 280, 241, 282, 217, 218, 219],
));
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const ABI: Option<(u32, [u32; 2], &[u32])> = None;

/// One BPF instruction: `struct sock_filter`.
struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

fn load(offset: u32) -> Insn {
    Insn {
        code: LD_W_ABS,
        jt: 0,
        jf: 0,
        k: offset,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn { code, jt, jf, k }
}

fn ret(k: u32) -> Insn {
    Insn {
        code: RET_K,
        jt: 0,
        jf: 0,
        k,
    }
}

/// The filter as bubblewrap reads it (`struct sock_filter`s, native byte
/// order), or `None` on an architecture it is not built for.
pub fn program() -> Option<Vec<u8>> {
    let (arch, [socket, socketpair], refused) = ABI?;
    let mut insns = vec![
        load(ARCH),
        jump(JEQ_K, arch, 1, 0),
        ret(ERRNO | ENOSYS),
        load(NR),
    ];
    if cfg!(target_arch = "x86_64") {
        // The x32 ABI's calls: the same numbers with bit 30 set.
        insns.push(jump(JGE_K, 0x4000_0000, 0, 1));
        insns.push(ret(ERRNO | ENOSYS));
    }
    for call in refused {
        insns.push(jump(JEQ_K, *call, 0, 1));
        insns.push(ret(ERRNO | EPERM));
    }
    insns.push(jump(JEQ_K, socket, 2, 0));
    insns.push(jump(JEQ_K, socketpair, 1, 0));
    insns.push(ret(ALLOW));
    insns.push(load(ARG0));
    for (index, family) in FAMILIES.iter().enumerate() {
        // Past the other families' checks and the refusal, to the allow.
        let to_allow = u8::try_from(FAMILIES.len() - index).unwrap_or(u8::MAX);
        insns.push(jump(JEQ_K, *family, to_allow, 0));
    }
    insns.push(ret(ERRNO | EAFNOSUPPORT));
    insns.push(ret(ALLOW));
    let mut bytes = Vec::with_capacity(insns.len() * 8);
    for insn in insns {
        bytes.extend(insn.code.to_ne_bytes());
        bytes.push(insn.jt);
        bytes.push(insn.jf);
        bytes.extend(insn.k.to_ne_bytes());
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the filter over one call, as the kernel would.
    fn verdict(program: &[u8], arch: u32, nr: u32, arg0: u32) -> u32 {
        let data = |offset: u32| match offset {
            NR => nr,
            ARCH => arch,
            ARG0 => arg0,
            other => panic!("reads offset {other}"),
        };
        let insns: Vec<(u16, u8, u8, u32)> = program
            .chunks(8)
            .map(|c| {
                (
                    u16::from_ne_bytes([c[0], c[1]]),
                    c[2],
                    c[3],
                    u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
                )
            })
            .collect();
        let (mut pc, mut accumulator) = (0usize, 0u32);
        loop {
            let (code, jt, jf, k) = insns[pc];
            pc += 1;
            match code {
                LD_W_ABS => accumulator = data(k),
                JEQ_K => pc += usize::from(if accumulator == k { jt } else { jf }),
                JGE_K => pc += usize::from(if accumulator >= k { jt } else { jf }),
                RET_K => return k,
                other => panic!("instruction {other:#x}"),
            }
        }
    }

    #[test]
    fn a_tool_opens_ip_unix_and_netlink_sockets_and_makes_no_refused_call() {
        let Some(program) = program() else {
            return;
        };
        let (arch, sockets, refused) = ABI.unwrap();
        let socket = sockets[0];
        for call in sockets {
            for family in FAMILIES {
                assert_eq!(verdict(&program, arch, call, family), ALLOW);
            }
            // vsock, AF_ALG, RDS, TIPC, packet.
            for family in [40, 38, 21, 30, 17] {
                assert_eq!(
                    verdict(&program, arch, call, family),
                    ERRNO | EAFNOSUPPORT,
                    "{call} {family}"
                );
            }
        }
        for call in refused {
            assert_eq!(verdict(&program, arch, *call, 0), ERRNO | EPERM, "{call}");
        }
        // Every other call, whatever its first argument.
        for call in [0, 1, 2, 59, 56, 435] {
            assert_eq!(verdict(&program, arch, call, 40), ALLOW, "{call}");
        }
        // Another ABI.
        assert_eq!(verdict(&program, 0x4000_0003, socket, 2), ERRNO | ENOSYS);
        if cfg!(target_arch = "x86_64") {
            assert_eq!(
                verdict(&program, arch, 0x4000_0000 | socket, 2),
                ERRNO | ENOSYS
            );
        }
    }
}
