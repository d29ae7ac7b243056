//! Enforcement on Linux: a Landlock ruleset and seccomp filters built in the parent, applied in
//! the child between fork and exec with nothing but system calls.

#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};
use tool_core::sandbox::NetworkAccess;

use crate::paths::Grants;
use crate::{SandboxError, Support};

/// What the kernel offers, probed once per process.
pub fn support() -> Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    *SUPPORT.get_or_init(|| {
        // SAFETY: the version query takes no pointer the kernel writes to (attr is null, size 0).
        let abi = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<u8>(),
                0usize,
                1u32, // LANDLOCK_CREATE_RULESET_VERSION
            )
        };
        // SAFETY: PR_GET_SECCOMP reads a value of the calling thread only.
        let seccomp = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) } >= 0;
        Support {
            landlock_abi: u8::try_from(abi).ok().filter(|&abi| abi > 0),
            seccomp: seccomp && target_arch().is_some(),
            mount_namespace: crate::protect::available(),
            // SAFETY: geteuid cannot fail and touches no memory.
            root: unsafe { libc::geteuid() } == 0,
        }
    })
}

fn target_arch() -> Option<TargetArch> {
    if cfg!(target_arch = "x86_64") {
        Some(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Some(TargetArch::aarch64)
    } else if cfg!(target_arch = "riscv64") {
        Some(TargetArch::riscv64)
    } else {
        None
    }
}

fn abi_of(version: u8) -> ABI {
    // Every ABI the crate knows (a newer kernel is treated as the newest known): from ABI 9 on,
    // connecting to a Unix socket by path needs a grant too.
    ABI::from(i32::from(version))
}

/// A Landlock ruleset for the grants, ready to be applied by `landlock_restrict_self`.
pub fn ruleset(
    grants: &Grants,
    output_files: &[std::os::fd::RawFd],
    network: NetworkAccess,
    version: u8,
) -> Result<OwnedFd, SandboxError> {
    let abi = abi_of(version);
    let build = || -> Result<Option<OwnedFd>, landlock::RulesetError> {
        let mut ruleset = Ruleset::default().set_compatibility(CompatLevel::HardRequirement);
        ruleset = ruleset.handle_access(AccessFs::from_all(abi))?;
        if network == NetworkAccess::Off && version >= 4 {
            ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
        }
        if version >= 6 {
            // Signals and abstract sockets reach only processes of this sandbox: a command cannot
            // kill or talk to another session's commands, or the server, even as the same user.
            ruleset = ruleset.scope(Scope::from_all(abi))?;
        }
        let mut created = ruleset.create()?;
        let read = AccessFs::from_read(abi);
        let all = AccessFs::from_all(abi);
        let file = AccessFs::from_file(abi);
        // The system trees are opened once per resolved set and shared by every command.
        for (fd, is_dir) in system_fds(&grants.system).iter() {
            created = created.add_rule(PathBeneath::new(fd, if *is_dir { read } else { read & file }))?;
        }
        // The command's own output files, by descriptor (an `O_PATH` open of the descriptor's
        // magic link names the very file, whatever its path has become).
        for fd in output_files {
            let Ok(path_fd) = PathFd::new(format!("/proc/self/fd/{fd}")) else { continue };
            created = created.add_rule(PathBeneath::new(path_fd, file))?;
        }
        for (paths, access) in [(&grants.read, read), (&grants.write, all), (&grants.files, all)] {
            for path in paths {
                let Ok(fd) = PathFd::new(path) else { continue };
                // Rules on a file may only carry file rights.
                let access = if is_dir(path) { access } else { access & file };
                created = created.add_rule(PathBeneath::new(fd, access))?;
            }
        }
        Ok(created.into())
    };
    match build() {
        Ok(Some(fd)) => Ok(fd),
        Ok(None) => Err(SandboxError::Setup("the kernel created no Landlock ruleset".into())),
        Err(error) => Err(SandboxError::Setup(format!("building the Landlock ruleset: {error}"))),
    }
}

type SystemFds = Arc<Vec<(PathFd, bool)>>;

/// Descriptors (`O_PATH`) of a resolved system read set, kept while the set is in use.
fn system_fds(system: &Arc<[PathBuf]>) -> SystemFds {
    static CACHE: Mutex<Vec<(Arc<[PathBuf]>, SystemFds)>> = Mutex::new(Vec::new());
    let mut cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, fds)) = cache.iter().find(|(set, _)| Arc::ptr_eq(set, system)) {
        return fds.clone();
    }
    let fds: SystemFds =
        Arc::new(system.iter().filter_map(|path| Some((PathFd::new(path).ok()?, is_dir(path)))).collect());
    // Sets the path cache has replaced are dropped with their descriptors.
    cache.retain(|(set, _)| Arc::strong_count(set) > 1);
    cache.push((system.clone(), fds.clone()));
    fds
}

/// A Landlock ruleset (its own layer, stacked on the filesystem one) that lets TCP connect to
/// every port but `blocked`. Landlock only grants, so that is 65 535 rules: built once per set
/// of ports and kept, since a ruleset can restrict any number of processes.
pub fn blocked_ports(blocked: &[u16]) -> Result<Arc<OwnedFd>, SandboxError> {
    static CACHE: Mutex<Vec<(Vec<u16>, Arc<OwnedFd>)>> = Mutex::new(Vec::new());
    let mut key = blocked.to_vec();
    key.sort_unstable();
    key.dedup();
    let mut cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, fd)) = cache.iter().find(|(ports, _)| *ports == key) {
        return Ok(fd.clone());
    }
    let build = || -> Result<Option<OwnedFd>, landlock::RulesetError> {
        let mut created = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessNet::ConnectTcp)?
            .create()?;
        for port in 0..=u16::MAX {
            if key.binary_search(&port).is_err() {
                created = created.add_rule(landlock::NetPort::new(port, AccessNet::ConnectTcp))?;
            }
        }
        Ok(created.into())
    };
    let fd = match build() {
        Ok(Some(fd)) => Arc::new(fd),
        Ok(None) => return Err(SandboxError::Setup("the kernel created no Landlock ruleset".into())),
        Err(error) => {
            return Err(SandboxError::Setup(format!("building the blocked-ports ruleset: {error}")));
        }
    };
    cache.push((key, fd.clone()));
    Ok(fd)
}

fn is_dir(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|meta| meta.is_dir())
}

/// System calls no command of an agent needs, and that would let it reach past the sandbox:
/// debugging other processes, mounting, kernel keyrings, modules, BPF, `io_uring` (which bypasses
/// seccomp), handles that open files by inode, and new namespaces.
const DENIED_SYSCALLS: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_fsconfig,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_keyctl,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_userfaultfd,
    libc::SYS_unshare,
    libc::SYS_setns,
];

/// `clone` flags that make a new namespace.
const NAMESPACE_FLAGS: [libc::c_int; 7] = [
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWCGROUP,
];

/// The seccomp filters: denied calls fail with `EPERM`; with the network off, sockets other than
/// Unix ones fail with `EACCES`; `clone3` fails with `ENOSYS` so that the C library falls back to
/// `clone`, whose flags a filter can see.
pub fn filters(network: NetworkAccess) -> Result<Arc<[BpfProgram]>, SandboxError> {
    // The same two programs for every command: compiled once per network setting.
    static OFF: OnceLock<Arc<[BpfProgram]>> = OnceLock::new();
    static ON: OnceLock<Arc<[BpfProgram]>> = OnceLock::new();
    let slot = match network {
        NetworkAccess::Off => &OFF,
        NetworkAccess::On => &ON,
    };
    if let Some(programs) = slot.get() {
        return Ok(programs.clone());
    }
    let programs: Arc<[BpfProgram]> = compile_filters(network)?.into();
    Ok(slot.get_or_init(|| programs).clone())
}

fn compile_filters(network: NetworkAccess) -> Result<Vec<BpfProgram>, SandboxError> {
    let arch =
        target_arch().ok_or_else(|| SandboxError::Setup("seccomp: unsupported architecture".into()))?;
    let setup = |error: seccompiler::BackendError| {
        SandboxError::Setup(format!("building the seccomp filter: {error}"))
    };
    let condition = |arg: u8, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(setup)
    };

    let mut denied: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED_SYSCALLS.iter().map(|&call| (call, Vec::new())).collect();
    let mut clone_rules = Vec::new();
    for flag in NAMESPACE_FLAGS {
        let flag = u64::from(flag.cast_unsigned());
        clone_rules
            .push(SeccompRule::new(vec![condition(0, SeccompCmpOp::MaskedEq(flag), flag)?]).map_err(setup)?);
    }
    denied.insert(libc::SYS_clone, clone_rules);
    let eperm = SeccompAction::Errno(libc::EPERM.cast_unsigned());
    let mut programs = vec![program(denied, eperm, arch)?];

    let mut enosys = BTreeMap::new();
    enosys.insert(libc::SYS_clone3, Vec::new());
    programs.push(program(enosys, SeccompAction::Errno(libc::ENOSYS.cast_unsigned()), arch)?);

    if let Some(x32) = refuse_x32() {
        programs.push(x32);
    }

    if network == NetworkAccess::Off {
        let unix = u64::from(libc::AF_UNIX.cast_unsigned());
        let mut sockets = BTreeMap::new();
        sockets.insert(
            libc::SYS_socket,
            vec![SeccompRule::new(vec![condition(0, SeccompCmpOp::Ne, unix)?]).map_err(setup)?],
        );
        programs.push(program(sockets, SeccompAction::Errno(libc::EACCES.cast_unsigned()), arch)?);
    }
    Ok(programs)
}

/// On x86-64, system calls of the x32 ABI carry the same architecture with bit 30 set in their
/// number, so a filter keyed on x86-64 numbers would not see them: every one is refused (nothing
/// an agent runs needs x32).
fn refuse_x32() -> Option<BpfProgram> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    use seccompiler::sock_filter;
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    let errno = SECCOMP_RET_ERRNO | libc::ENOSYS.cast_unsigned();
    Some(vec![
        // seccomp_data.nr is at offset 0.
        sock_filter { code: LD_W_ABS, jt: 0, jf: 0, k: 0 },
        sock_filter { code: JGE_K, jt: 0, jf: 1, k: 0x4000_0000 },
        sock_filter { code: RET_K, jt: 0, jf: 0, k: errno },
        sock_filter { code: RET_K, jt: 0, jf: 0, k: SECCOMP_RET_ALLOW },
    ])
}

fn program(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    action: SeccompAction,
    arch: TargetArch,
) -> Result<BpfProgram, SandboxError> {
    SeccompFilter::new(rules, SeccompAction::Allow, action, arch)
        .and_then(BpfProgram::try_from)
        .map_err(|error| SandboxError::Setup(format!("building the seccomp filter: {error}")))
}

/// `_LINUX_CAPABILITY_VERSION_3`.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

// Securebits (linux/securebits.h): root gains nothing by exec, and nobody may undo that.
const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
const SECBIT_KEEP_CAPS_LOCKED: libc::c_ulong = 1 << 5;
const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;

/// Runs in the child after fork, before exec: only system calls on prepared data, no allocation,
/// no lock (the parent may have held any lock when it forked).
///
/// Order: drop every capability (so root inside is an ordinary user to the kernel), set
/// `no_new_privs` (so no setuid or file-capability binary gives them back), enter the Landlock
/// domain, then install the seccomp filters. Each step is inherited across exec and fork, so the
/// whole process group — children, grandchildren, background jobs — stays in the box.
pub fn enter(landlock: Option<&OwnedFd>, ports: Option<&OwnedFd>, filters: &[BpfProgram]) -> io::Result<()> {
    let check = |rc: libc::c_long| if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) };
    // SAFETY: every call below is a plain system call on integers or on pointers to data that lives
    // for the duration of the call; none allocates or takes a lock.
    unsafe {
        // These three need CAP_SETPCAP; without it the process holds no capability to drop.
        libc::prctl(
            libc::PR_SET_SECUREBITS,
            SECBIT_NOROOT
                | SECBIT_NOROOT_LOCKED
                | SECBIT_NO_SETUID_FIXUP
                | SECBIT_NO_SETUID_FIXUP_LOCKED
                | SECBIT_KEEP_CAPS_LOCKED
                | SECBIT_NO_CAP_AMBIENT_RAISE
                | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
            0,
            0,
            0,
        );
        for cap in 0..64 {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        let mut header = CapHeader { version: CAPABILITY_VERSION_3, pid: 0 };
        let data = [CapData { effective: 0, permitted: 0, inheritable: 0 }; 2];
        check(libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr()))?;

        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0).into())?;
        // Each ruleset is a layer of its own: an access must pass both.
        for fd in [landlock, ports].into_iter().flatten() {
            check(libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32))?;
        }
    }
    for filter in filters {
        seccompiler::apply_filter(filter).map_err(|error| match error {
            seccompiler::Error::Prctl(error) | seccompiler::Error::Seccomp(error) => error,
            _ => io::Error::from(io::ErrorKind::InvalidInput),
        })?;
    }
    Ok(())
}
