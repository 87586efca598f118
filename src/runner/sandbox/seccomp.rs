//! The system calls a sandboxed tool may not make (docs/SECURITY.md,
//! "The tool sandbox", System calls): a seccomp filter bubblewrap loads
//! just before it starts the tool, for the tool and everything it starts.
//!
//! The firewall sees IP only, and a socket the kernel has no module
//! loaded for makes it load one: so a tool gets unix sockets, TCP and UDP
//! over IPv4 and IPv6, and netlink's route protocol (name and address
//! lookups), nothing else: no vsock to the hypervisor's services, no
//! AF_ALG, no SCTP, SMC, L2TP or TIPC, no generic netlink (whose families
//! load modules by name) and no sock_diag (the host's sockets). And none
//! of a few calls that open much of the kernel to an unprivileged process
//! and that no tool needs: io_uring, eBPF, perf events, userfaultfd and
//! the kernel's keyrings. A refused call fails with an error
//! (`EAFNOSUPPORT`, `EPROTONOSUPPORT`, `EPERM`), it does not kill the
//! tool. Calls of another ABI than the runner's own (i386 through
//! `int 0x80`, x32) fail with `ENOSYS`.
//!
//! The filter is classic BPF over `struct seccomp_data`, built here for
//! little-endian x86-64 and aarch64; elsewhere tools run without one (said
//! at start).

/// What the supervisor replaces with the descriptor it loads the filter
/// into, in bubblewrap's `--seccomp` argument.
pub const FD_ARG: &str = "@execplane-seccomp-fd";

/// `struct seccomp_data`: the call's number, then its ABI, then (after
/// the instruction pointer) its arguments, 8 bytes each.
const NR: u32 = 0;
const ARCH: u32 = 4;
/// The first argument's low 32 bits (little-endian; both ABIs here are).
const ARG0: u32 = 16;

/// The second and third arguments' low 32 bits: a socket's type (and
/// flags), its protocol.
const ARG1: u32 = 24;
const ARG2: u32 = 32;

const LD_W_ABS: u16 = 0x20;
const AND_K: u16 = 0x54;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;

const ALLOW: u32 = 0x7fff_0000;
const ERRNO: u32 = 0x0005_0000;
const EPERM: u32 = 1;
const ENOSYS: u32 = 38;
const EAFNOSUPPORT: u32 = 97;

const EPROTONOSUPPORT: u32 = 93;

/// The socket families, types and protocols a tool may open.
const AF_UNIX: u32 = 1;
const AF_INET: u32 = 2;
const AF_INET6: u32 = 10;
const AF_NETLINK: u32 = 16;
const NETLINK_ROUTE: u32 = 0;
const SOCK_STREAM: u32 = 1;
const SOCK_DGRAM: u32 = 2;
/// A socket type's own bits, without `SOCK_NONBLOCK` and `SOCK_CLOEXEC`.
const SOCK_TYPE_MASK: u32 = 0xf;
const IPPROTO_TCP: u32 = 6;
const IPPROTO_UDP: u32 = 17;

/// The ABI's audit number, its `socket` and `socketpair` calls and the
/// calls refused.
#[cfg(all(target_arch = "x86_64", target_endian = "little"))]
const ABI: Option<(u32, [u32; 2], &[u32])> = Some((
    0xc000_003e,
    [41, 53],
    // io_uring_setup, _enter, _register; bpf; perf_event_open;
    // userfaultfd; add_key, request_key, keyctl.
    &[425, 426, 427, 321, 298, 323, 248, 249, 250],
));
#[cfg(all(target_arch = "aarch64", target_endian = "little"))]
const ABI: Option<(u32, [u32; 2], &[u32])> = Some((
    0xc000_00b7,
    [198, 199],
    &[425, 426, 427, 280, 241, 282, 217, 218, 219],
));
#[cfg(not(all(
    any(target_arch = "x86_64", target_arch = "aarch64"),
    target_endian = "little"
)))]
const ABI: Option<(u32, [u32; 2], &[u32])> = None;

/// One BPF instruction, its jumps to labels (resolved by [`assemble`]).
enum Insn {
    Load(u32),
    And(u32),
    /// `code`, `k`, then where to go when it holds and when it does not.
    Jump(u16, u32, To, To),
    Ret(u32),
    Here(Label),
}

/// Where a jump goes.
#[derive(Clone, Copy)]
enum To {
    Next,
    /// Past the next instruction.
    Over,
    Label(Label),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Label {
    Allow,
    Family,
    Inet,
    Netlink,
    Protocol,
    NoProtocol,
}

/// `struct sock_filter`s, native byte order, with every jump resolved
/// (forward only, as BPF's are).
fn assemble(insns: &[Insn]) -> Vec<u8> {
    let mut labels = Vec::new();
    let mut index = 0usize;
    for insn in insns {
        match insn {
            Insn::Here(label) => labels.push((*label, index)),
            _ => index += 1,
        }
    }
    let offset = |from: usize, to: To| -> u8 {
        let target = match to {
            To::Next => from + 1,
            To::Over => from + 2,
            To::Label(label) => labels
                .iter()
                .find(|(name, _)| *name == label)
                .map(|(_, at)| *at)
                .unwrap_or_else(|| panic!("no label {label:?}")),
        };
        u8::try_from(target - (from + 1)).expect("a jump within 255 instructions")
    };
    let mut bytes = Vec::new();
    let mut index = 0usize;
    for insn in insns {
        let (code, jt, jf, k) = match *insn {
            Insn::Here(_) => continue,
            Insn::Load(at) => (LD_W_ABS, 0, 0, at),
            Insn::And(mask) => (AND_K, 0, 0, mask),
            Insn::Jump(code, k, yes, no) => (code, offset(index, yes), offset(index, no), k),
            Insn::Ret(k) => (RET_K, 0, 0, k),
        };
        bytes.extend(code.to_ne_bytes());
        bytes.push(jt);
        bytes.push(jf);
        bytes.extend(k.to_ne_bytes());
        index += 1;
    }
    bytes
}

/// The filter as bubblewrap reads it, or `None` on an architecture it is
/// not built for.
pub fn program() -> Option<Vec<u8>> {
    use Insn::{And, Here, Jump, Load, Ret};
    use Label::{Allow, Family, Inet, Netlink, NoProtocol, Protocol};
    let (arch, [socket, socketpair], refused) = ABI?;
    let mut insns = vec![
        Load(ARCH),
        Jump(JEQ_K, arch, To::Over, To::Next),
        Ret(ERRNO | ENOSYS),
        Load(NR),
    ];
    if cfg!(target_arch = "x86_64") {
        // The x32 ABI's calls: the same numbers with bit 30 set.
        insns.push(Jump(JGE_K, 0x4000_0000, To::Next, To::Over));
        insns.push(Ret(ERRNO | ENOSYS));
    }
    for call in refused {
        insns.push(Jump(JEQ_K, *call, To::Next, To::Over));
        insns.push(Ret(ERRNO | EPERM));
    }
    insns.extend([
        Jump(JEQ_K, socket, To::Label(Family), To::Next),
        Jump(JEQ_K, socketpair, To::Label(Family), To::Next),
        Ret(ALLOW),
        // The family (the first argument's low 32 bits, as the kernel
        // reads it).
        Here(Family),
        Load(ARG0),
        Jump(JEQ_K, AF_UNIX, To::Label(Allow), To::Next),
        Jump(JEQ_K, AF_INET, To::Label(Inet), To::Next),
        Jump(JEQ_K, AF_INET6, To::Label(Inet), To::Next),
        Jump(JEQ_K, AF_NETLINK, To::Label(Netlink), To::Next),
        Ret(ERRNO | EAFNOSUPPORT),
        // Netlink: routes and addresses only (name lookups); another
        // protocol would load its module, or list the host's sockets.
        Here(Netlink),
        Load(ARG2),
        Jump(
            JEQ_K,
            NETLINK_ROUTE,
            To::Label(Allow),
            To::Label(NoProtocol),
        ),
        // IP: a stream or datagram socket of TCP or UDP; another type or
        // protocol (SCTP, SMC, L2TP, SOCK_PACKET) would load a module.
        Here(Inet),
        Load(ARG1),
        And(SOCK_TYPE_MASK),
        Jump(JEQ_K, SOCK_STREAM, To::Label(Protocol), To::Next),
        Jump(
            JEQ_K,
            SOCK_DGRAM,
            To::Label(Protocol),
            To::Label(NoProtocol),
        ),
        Here(Protocol),
        Load(ARG2),
        Jump(JEQ_K, 0, To::Label(Allow), To::Next),
        Jump(JEQ_K, IPPROTO_TCP, To::Label(Allow), To::Next),
        Jump(JEQ_K, IPPROTO_UDP, To::Label(Allow), To::Next),
        Here(NoProtocol),
        Ret(ERRNO | EPROTONOSUPPORT),
        Here(Allow),
        Ret(ALLOW),
    ]);
    Some(assemble(&insns))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the filter over one call, as the kernel would: the call's
    /// number and its first three arguments.
    fn verdict(program: &[u8], arch: u32, nr: u32, args: [u32; 3]) -> u32 {
        let data = |offset: u32| match offset {
            NR => nr,
            ARCH => arch,
            ARG0 => args[0],
            ARG1 => args[1],
            ARG2 => args[2],
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
                AND_K => accumulator &= k,
                JEQ_K => pc += usize::from(if accumulator == k { jt } else { jf }),
                JGE_K => pc += usize::from(if accumulator >= k { jt } else { jf }),
                RET_K => return k,
                other => panic!("instruction {other:#x}"),
            }
        }
    }

    #[test]
    fn a_tool_opens_tcp_udp_unix_and_route_sockets_and_makes_no_refused_call() {
        let Some(program) = program() else {
            return;
        };
        let (arch, sockets, refused) = ABI.unwrap();
        const NONBLOCK_CLOEXEC: u32 = 0x800 | 0x80000;
        let no_protocol = ERRNO | EPROTONOSUPPORT;
        for call in sockets {
            let opens = |args: [u32; 3]| verdict(&program, arch, call, args);
            for args in [
                [AF_UNIX, SOCK_STREAM, 0],
                [AF_UNIX, 5, 0],
                [AF_INET, SOCK_STREAM, 0],
                [AF_INET, SOCK_STREAM | NONBLOCK_CLOEXEC, IPPROTO_TCP],
                [AF_INET6, SOCK_DGRAM, IPPROTO_UDP],
                [AF_INET6, SOCK_DGRAM | NONBLOCK_CLOEXEC, 0],
                [AF_NETLINK, 3 | NONBLOCK_CLOEXEC, NETLINK_ROUTE],
            ] {
                assert_eq!(opens(args), ALLOW, "{call} {args:?}");
            }
            // vsock, AF_ALG, RDS, TIPC, packet, bluetooth.
            for family in [40, 38, 21, 30, 17, 31] {
                assert_eq!(
                    opens([family, SOCK_STREAM, 0]),
                    ERRNO | EAFNOSUPPORT,
                    "{call} {family}"
                );
            }
            for args in [
                // SCTP, SMC, ICMP.
                [AF_INET, SOCK_STREAM, 132],
                [AF_INET6, SOCK_STREAM, 256],
                [AF_INET, SOCK_DGRAM, 1],
                // SOCK_PACKET (made a packet socket after the filter),
                // raw, seqpacket (SCTP's).
                [AF_INET, 10, 0],
                [AF_INET, 3, 0],
                [AF_INET6, 5, 0],
                // Generic netlink (its families load modules by name),
                // sock_diag (the host's sockets), uevents, userland.
                [AF_NETLINK, 3, 16],
                [AF_NETLINK, 3, 4],
                [AF_NETLINK, 2, 15],
                [AF_NETLINK, 3, 2],
            ] {
                assert_eq!(opens(args), no_protocol, "{call} {args:?}");
            }
        }
        for call in refused {
            assert_eq!(
                verdict(&program, arch, *call, [0; 3]),
                ERRNO | EPERM,
                "{call}"
            );
        }
        // Every other call, whatever its arguments.
        for call in [0, 1, 2, 59, 56, 435] {
            assert_eq!(
                verdict(&program, arch, call, [40, 10, 132]),
                ALLOW,
                "{call}"
            );
        }
        // Another ABI.
        let socket = sockets[0];
        assert_eq!(
            verdict(&program, 0x4000_0003, socket, [AF_INET, SOCK_STREAM, 0]),
            ERRNO | ENOSYS
        );
        if cfg!(target_arch = "x86_64") {
            assert_eq!(
                verdict(
                    &program,
                    arch,
                    0x4000_0000 | socket,
                    [AF_INET, SOCK_STREAM, 0]
                ),
                ERRNO | ENOSYS
            );
        }
    }
}
