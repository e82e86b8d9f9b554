//! DWARF unwinding of the exemplar stack copies (`stack_copies` in
//! `bpf/core/callsites.h`): the frames the kernel's frame-pointer walk cannot
//! see, above a function built without frame pointers (Debian's glibc,
//! most distribution libraries).
//!
//! The kernel keeps, for the first sample of each distinct call site, the
//! user registers (ip, sp, frame pointer, and on arm64 the link register)
//! and 4 to 8 KiB of user stack from the stack pointer up
//! (`struct sp_stack_copy`). Here framehop unwinds that copy with the
//! `.eh_frame` call-frame information of the binaries the process maps:
//! memory is read only from the copy, so the walk stops where the copy
//! ends (a frame more than about 4 KiB above the syscall) or at code
//! without call-frame information (JIT code: framehop falls back to the
//! frame pointer there).
//!
//! Costs and bounds: per process, /proc/PID/maps is read once per pass
//! ([`Unwinding::new_pass`]: once per doctor report, once per harvest of the
//! agent) and each file it maps executable is opened through
//! /proc/PID/map_files (so processes in containers work) and its
//! `.eh_frame` and `.eh_frame_hdr` copied out once, then shared by every
//! process that maps the same file (same device and inode): about 1.5 MB
//! for libjvm, 100 to 300 KB for libc. At most [`MAX_CACHED_BYTES`] of
//! sections are kept; past that the file cache starts again. The vDSO's
//! sections come from the agent's own vDSO (the same kernel image for every
//! 64-bit process). One unwind is at most [`MAX_FRAMES`] frames, each a
//! binary search in `.eh_frame_hdr` and a few reads from the copy.
//! Measured: the doctor's call sites of a JVM sleeping in a loop (three
//! sites, libjvm's sections read for the first) took 49 ms to unwind and
//! symbolize; the whole `slowpath doctor --duration=2s` took as long as
//! without unwinding (2.2 to 2.3 s either way) with 7 MB more resident
//! memory (47 MB instead of 40).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::sync::Arc;

use framehop::{ExplicitModuleSectionInfo, Module, Unwinder};
use object::read::ReadCache;
use object::{Object, ObjectSection, ObjectSegment, SegmentFlags};

#[cfg(target_arch = "aarch64")]
use framehop::aarch64::{
    CacheAarch64 as NativeCache, PtrAuthMask, UnwindRegsAarch64, UnwinderAarch64 as NativeUnwinder,
};
#[cfg(target_arch = "x86_64")]
use framehop::x86_64::{
    CacheX86_64 as NativeCache, UnwindRegsX86_64, UnwinderX86_64 as NativeUnwinder,
};

/// Section bytes, shared between the processes that map one file.
type Data = Arc<[u8]>;

/// Deepest unwind, like the kernel's walk (`SP_MAX_STACK_DEPTH`).
pub const MAX_FRAMES: usize = 127;
/// Unwind sections kept across processes before the file cache starts
/// again (libjvm's are about 1.5 MB, libc's 100 to 300 KB).
pub const MAX_CACHED_BYTES: usize = 64 << 20;
/// PT_LOAD segments are mapped at page boundaries: the largest page size
/// (arm64 with 64 KiB pages) bounds how far below a segment's file offset
/// its mapping's offset can be.
const MAX_PAGE_SIZE: u64 = 64 << 10;

/// The user registers and top of user stack of one sample
/// (`struct sp_stack_copy`).
#[derive(Clone, PartialEq, Eq)]
pub struct StackCopy {
    pub ip: u64,
    pub sp: u64,
    /// rbp on x86_64, x29 on arm64.
    pub fp: u64,
    /// x30 on arm64; 0 on x86_64.
    pub lr: u64,
    /// The stack from `sp` up (only the bytes the kernel could read).
    pub data: Vec<u8>,
}

impl fmt::Debug for StackCopy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "StackCopy {{ ip: {:#x}, sp: {:#x}, fp: {:#x}, lr: {:#x}, {} bytes }}",
            self.ip,
            self.sp,
            self.fp,
            self.lr,
            self.data.len()
        )
    }
}

impl StackCopy {
    /// The word at `addr`, if the copy holds all of it; nothing else of the
    /// process's memory is readable.
    fn read(&self, addr: u64) -> Result<u64, ()> {
        let off = usize::try_from(addr.checked_sub(self.sp).ok_or(())?).map_err(|_| ())?;
        let bytes = self
            .data
            .get(off..off.checked_add(8).ok_or(())?)
            .ok_or(())?;
        Ok(u64::from_ne_bytes(bytes.try_into().map_err(|_| ())?))
    }
}

/// Addresses recovered from one copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unwound {
    /// The instruction pointer, then return addresses (innermost first).
    pub addrs: Vec<u64>,
    /// framehop found the end of the stack (a root frame, or a zero return
    /// address or frame pointer), rather than running out of copy or
    /// unwind information.
    pub complete: bool,
}

/// One line of /proc/PID/maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub range: Range<u64>,
    pub exec: bool,
    /// File offset of `range.start`.
    pub offset: u64,
    /// The file's device (`major:minor`, hex) and inode: they name one file
    /// across processes and containers.
    pub dev: String,
    pub inode: u64,
    /// File path as the process sees it, or `[vdso]`, `[stack]`, ...
    pub path: String,
}

/// Parse /proc/PID/maps (`start-end perms offset dev inode path`).
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(6, ' ');
            let (start, end) = fields.next()?.split_once('-')?;
            let perms = fields.next()?;
            let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
            let dev = fields.next()?.to_string();
            let inode = fields.next()?.parse().ok()?;
            let path = fields.next().unwrap_or("").trim_start().to_string();
            Some(Mapping {
                range: u64::from_str_radix(start, 16).ok()?..u64::from_str_radix(end, 16).ok()?,
                exec: perms.as_bytes().get(2) == Some(&b'x'),
                offset,
                dev,
                inode,
                path,
            })
        })
        .collect()
}

/// What framehop needs of one ELF file, copied out once.
struct UnwindSections {
    eh_frame: Option<(Range<u64>, Data)>,
    eh_frame_hdr: Option<(Range<u64>, Data)>,
    text: Option<Range<u64>>,
    got: Option<Range<u64>>,
    /// Executable PT_LOAD segments: (file offset, address).
    exec_loads: Vec<(u64, u64)>,
    /// Bytes held.
    bytes: usize,
}

impl UnwindSections {
    fn parse<'data, R: object::ReadRef<'data>>(data: R) -> Option<Self> {
        let file = object::File::parse(data).ok()?;
        let range = |name: &str| {
            file.section_by_name(name)
                .map(|s| s.address()..s.address() + s.size())
        };
        let with_data = |name: &str| {
            let s = file.section_by_name(name)?;
            let bytes: Data = Arc::from(s.data().ok()?);
            Some((s.address()..s.address() + s.size(), bytes))
        };
        let eh_frame = with_data(".eh_frame");
        let eh_frame_hdr = with_data(".eh_frame_hdr");
        let exec_loads = file
            .segments()
            .filter(|s| matches!(s.flags(), SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0))
            .map(|s| (s.file_range().0, s.address()))
            .collect();
        let bytes = [&eh_frame, &eh_frame_hdr]
            .iter()
            .filter_map(|s| s.as_ref().map(|(_, d)| d.len()))
            .sum();
        Some(Self {
            eh_frame,
            eh_frame_hdr,
            text: range(".text"),
            got: range(".got"),
            exec_loads,
            bytes,
        })
    }

    fn module_info(&self) -> ExplicitModuleSectionInfo<Data> {
        ExplicitModuleSectionInfo {
            base_svma: 0, // ELF: addresses in the file are relative to 0
            text_svma: self.text.clone(),
            got_svma: self.got.clone(),
            eh_frame_svma: self.eh_frame.as_ref().map(|(r, _)| r.clone()),
            eh_frame: self.eh_frame.as_ref().map(|(_, d)| d.clone()),
            eh_frame_hdr_svma: self.eh_frame_hdr.as_ref().map(|(r, _)| r.clone()),
            eh_frame_hdr: self.eh_frame_hdr.as_ref().map(|(_, d)| d.clone()),
            ..Default::default()
        }
    }

    /// Load bias (actual address minus the address in the file) of an
    /// executable mapping of file offset `offset` at `start`: the mapping
    /// holds the executable segment whose file offset is at or just above
    /// `offset` (segments start mid-page; mappings start on a page).
    fn bias(&self, start: u64, offset: u64) -> Option<u64> {
        let &(seg_offset, seg_addr) = self
            .exec_loads
            .iter()
            .filter(|(o, _)| *o >= offset && o - offset < MAX_PAGE_SIZE)
            .min_by_key(|(o, _)| o - offset)?;
        let addr_at_start = seg_addr.wrapping_sub(seg_offset - offset);
        Some(start.wrapping_sub(addr_at_start))
    }
}

/// A process's mappings and, once something is unwound in it, its unwinder.
struct ProcessModules {
    maps: Vec<Mapping>,
    unwinder: Option<NativeUnwinder<Data>>,
}

/// Unwinders of the processes of one pass and the files they map; lives on
/// one thread with the blazesym symbolizer.
pub struct Unwinding {
    files: HashMap<(String, u64), Option<Arc<UnwindSections>>>,
    file_bytes: usize,
    /// The agent's own vDSO and its length, read at first use.
    vdso: Option<Option<(Arc<UnwindSections>, u64)>>,
    procs: HashMap<u32, Option<ProcessModules>>,
    cache: Box<NativeCache>,
}

impl Default for Unwinding {
    fn default() -> Self {
        Self::new()
    }
}

thread_local! {
    /// The unwinding state of this thread, for callers that hold none (the
    /// doctor: one report per run).
    static THREAD_UNWINDING: RefCell<Unwinding> = RefCell::new(Unwinding::new());
}

/// Run `f` with this thread's [`Unwinding`].
pub fn with_thread_unwinding<T>(f: impl FnOnce(&mut Unwinding) -> T) -> T {
    THREAD_UNWINDING.with(|u| f(&mut u.borrow_mut()))
}

impl Unwinding {
    pub fn new() -> Self {
        Self {
            files: HashMap::new(),
            file_bytes: 0,
            vdso: None,
            procs: HashMap::new(),
            cache: Box::new(NativeCache::new()),
        }
    }

    /// Forget the processes' mappings (they may have loaded or unloaded
    /// libraries since); the parsed files stay.
    pub fn new_pass(&mut self) {
        self.procs.clear();
    }

    /// Unwind `copy`, taken in process `pid`; `None` when its memory map
    /// cannot be read (gone, or no access).
    pub fn unwind(&mut self, pid: u32, copy: &StackCopy) -> Option<Unwound> {
        self.load_maps(pid)?;
        if self.procs.get(&pid)?.as_ref()?.unwinder.is_none() {
            let unwinder = self.build_unwinder(pid);
            self.procs.get_mut(&pid)?.as_mut()?.unwinder = Some(unwinder);
        }
        let unwinder = self.procs.get(&pid)?.as_ref()?.unwinder.as_ref()?;
        #[cfg(target_arch = "x86_64")]
        let regs = UnwindRegsX86_64::new(copy.ip, copy.sp, copy.fp);
        #[cfg(target_arch = "aarch64")]
        let regs = UnwindRegsAarch64::new_with_ptr_auth_mask(
            // pointer authentication bits are above every code address
            PtrAuthMask::from_max_known_address(unwinder.max_known_code_address()),
            copy.lr,
            copy.sp,
            copy.fp,
        );
        let mut read = |addr| copy.read(addr);
        let mut frames = unwinder.iter_frames(copy.ip, regs, &mut self.cache, &mut read);
        let mut out = Unwound {
            addrs: Vec::new(),
            complete: false,
        };
        while out.addrs.len() < MAX_FRAMES {
            match frames.next() {
                Ok(Some(frame)) => out.addrs.push(frame.address()),
                Ok(None) => {
                    out.complete = true;
                    break;
                }
                // out of copy, or no way to unwind a frame
                Err(err) => {
                    tracing::debug!(
                        pid,
                        frames = out.addrs.len(),
                        copied = copy.data.len(),
                        %err,
                        "unwinding stopped"
                    );
                    break;
                }
            }
        }
        Some(out)
    }

    /// The file mapped at `addr` in `pid` (the executable or library a
    /// frame blazesym cannot name is in).
    pub fn file_at(&mut self, pid: u32, addr: u64) -> Option<String> {
        self.load_maps(pid)?;
        let maps = &self.procs.get(&pid)?.as_ref()?.maps;
        maps.iter()
            .find(|m| m.range.contains(&addr) && (m.path.starts_with('/') || m.path == "[vdso]"))
            .map(|m| m.path.clone())
    }

    fn load_maps(&mut self, pid: u32) -> Option<()> {
        let entry = self.procs.entry(pid).or_insert_with(|| {
            let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
            Some(ProcessModules {
                maps: parse_maps(&text),
                unwinder: None,
            })
        });
        entry.as_ref().map(|_| ())
    }

    /// A module for each file `pid` maps executable, and the vDSO.
    fn build_unwinder(&mut self, pid: u32) -> NativeUnwinder<Data> {
        let mut unwinder = NativeUnwinder::new();
        let maps = match self.procs.get(&pid) {
            Some(Some(p)) => p.maps.clone(),
            _ => return unwinder,
        };
        // the executable mappings of each file, in address order
        let mut files: Vec<(&Mapping, Range<u64>)> = Vec::new();
        for m in maps.iter().filter(|m| m.exec) {
            match files
                .iter_mut()
                .find(|(f, _)| f.dev == m.dev && f.inode == m.inode && f.path == m.path)
            {
                Some((_, range)) => range.end = range.end.max(m.range.end),
                None => files.push((m, m.range.clone())),
            }
        }
        for (first, range) in files {
            let sections = if first.path == "[vdso]" {
                // another image than the agent's (a 32-bit process) is not used
                self.own_vdso()
                    .filter(|(_, len)| *len == first.range.end - first.range.start)
                    .map(|(s, _)| s)
            } else if first.path.starts_with('/') && first.inode != 0 {
                self.file_sections(pid, first)
            } else {
                None // anonymous: JIT code, framehop falls back to the frame pointer
            };
            let Some(sections) = sections else { continue };
            let Some(bias) = sections.bias(first.range.start, first.offset) else {
                continue;
            };
            unwinder.add_module(Module::new(
                first.path.clone(),
                range,
                bias,
                sections.module_info(),
            ));
        }
        unwinder
    }

    /// The unwind sections of the file mapped by `m` in `pid`, parsed once
    /// per file.
    fn file_sections(&mut self, pid: u32, m: &Mapping) -> Option<Arc<UnwindSections>> {
        let key = (m.dev.clone(), m.inode);
        if let Some(known) = self.files.get(&key) {
            return known.clone();
        }
        let parsed = open_mapped(pid, m).and_then(|file| {
            let cache = ReadCache::new(file);
            UnwindSections::parse(&cache).map(Arc::new)
        });
        let bytes = parsed.as_ref().map_or(0, |s| s.bytes);
        if self.file_bytes + bytes > MAX_CACHED_BYTES {
            self.files.clear();
            self.file_bytes = 0;
        }
        self.file_bytes += bytes;
        self.files.insert(key, parsed.clone());
        parsed
    }

    fn own_vdso(&mut self) -> Option<(Arc<UnwindSections>, u64)> {
        self.vdso
            .get_or_insert_with(|| {
                let image = read_own_vdso()?;
                let sections = UnwindSections::parse(image.as_slice())?;
                Some((Arc::new(sections), image.len() as u64))
            })
            .clone()
    }
}

/// The file behind mapping `m` of `pid`: through map_files (the very file,
/// even in another mount namespace or deleted), else through the process's
/// root.
fn open_mapped(pid: u32, m: &Mapping) -> Option<File> {
    File::open(format!(
        "/proc/{pid}/map_files/{:x}-{:x}",
        m.range.start, m.range.end
    ))
    .or_else(|_| File::open(format!("/proc/{pid}/root{}", m.path)))
    .ok()
}

/// The agent's own vDSO image (the kernel maps the same one into every
/// process of an architecture), read through /proc/self/mem.
fn read_own_vdso() -> Option<Vec<u8>> {
    let maps = parse_maps(&std::fs::read_to_string("/proc/self/maps").ok()?);
    let vdso = maps.iter().find(|m| m.path == "[vdso]")?;
    let len = usize::try_from(vdso.range.end - vdso.range.start).ok()?;
    let mut mem = File::open("/proc/self/mem").ok()?;
    mem.seek(SeekFrom::Start(vdso.range.start)).ok()?;
    let mut image = vec![0; len];
    mem.read_exact(&mut image).ok()?;
    Some(image)
}

#[cfg(test)]
mod tests {
    use super::*;
    use blazesym::symbolize::source::{Process, Source};
    use blazesym::symbolize::{Input, Symbolizer};
    use blazesym::Pid;

    #[test]
    fn maps_lines_are_parsed() {
        let maps = parse_maps(
            "55f4621af000-55f4621b0000 r-xp 00001000 fe:00 9994407                    /tmp/a b\n\
             7fd67a003000-7fd67a00f000 rw-p 00000000 00:00 0 \n\
             7fff5827d000-7fff5829e000 rw-p 00000000 00:00 0                          [stack]\n",
        );
        assert_eq!(maps.len(), 3);
        assert_eq!(maps[0].range, 0x55f4621af000..0x55f4621b0000);
        assert!(maps[0].exec && !maps[1].exec);
        assert_eq!((maps[0].offset, maps[0].inode), (0x1000, 9994407));
        assert_eq!(maps[0].dev, "fe:00");
        assert_eq!(maps[0].path, "/tmp/a b");
        assert_eq!(maps[1].path, "");
        assert_eq!(maps[2].path, "[stack]");
    }

    #[test]
    fn only_the_copy_is_readable() {
        let copy = StackCopy {
            ip: 0,
            sp: 0x1000,
            fp: 0,
            lr: 0,
            data: (0..16u8).collect(),
        };
        assert_eq!(
            copy.read(0x1000),
            Ok(u64::from_ne_bytes([0, 1, 2, 3, 4, 5, 6, 7]))
        );
        assert!(copy.read(0x1008).is_ok());
        assert!(copy.read(0x1009).is_err()); // would run past the copy
        assert!(copy.read(0xff8).is_err());
        assert!(copy.read(u64::MAX).is_err());
    }

    /// What the kernel keeps: the registers here, and the stack from the
    /// stack pointer to the end of its page and the next page (read through
    /// /proc/self/mem, which fails where nothing is mapped).
    #[inline(never)]
    fn copy_here() -> StackCopy {
        let (ip, sp, fp, lr): (u64, u64, u64, u64);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: reads the instruction pointer, stack pointer and frame
        // pointer into registers; touches no memory and no flags.
        unsafe {
            std::arch::asm!(
                "lea {ip}, [rip]",
                "mov {sp}, rsp",
                "mov {fp}, rbp",
                ip = out(reg) ip,
                sp = out(reg) sp,
                fp = out(reg) fp,
                options(nomem, nostack, preserves_flags),
            );
            lr = 0;
        }
        #[cfg(target_arch = "aarch64")]
        // SAFETY: reads pc, sp, x29 and x30 into registers; touches no
        // memory and no flags.
        unsafe {
            std::arch::asm!(
                "adr {ip}, .",
                "mov {sp}, sp",
                "mov {fp}, x29",
                "mov {lr}, x30",
                ip = out(reg) ip,
                sp = out(reg) sp,
                fp = out(reg) fp,
                lr = out(reg) lr,
                options(nomem, nostack, preserves_flags),
            );
        }
        let mut mem = File::open("/proc/self/mem").expect("/proc/self/mem");
        let mut data = Vec::new();
        let first = 4096 - (sp & 4095);
        for (at, len) in [(sp, first), (sp + first, 4096)] {
            let mut page = vec![0; len as usize];
            if mem.seek(SeekFrom::Start(at)).is_err() || mem.read_exact(&mut page).is_err() {
                break;
            }
            data.extend(page);
        }
        StackCopy {
            ip,
            sp,
            fp,
            lr,
            data,
        }
    }

    #[inline(never)]
    fn unwind_marker_outer() -> StackCopy {
        let copy = copy_here();
        std::hint::black_box(copy)
    }

    #[test]
    fn unwinds_a_copy_of_its_own_stack() {
        let copy = unwind_marker_outer();
        let pid = std::process::id();
        let mut unwinding = Unwinding::new();
        let unwound = unwinding.unwind(pid, &copy).expect("own memory map");
        assert!(unwound.addrs.len() >= 3, "{unwound:?}");
        let lookup: Vec<u64> = unwound
            .addrs
            .iter()
            .enumerate()
            .map(|(i, &a)| if i == 0 { a } else { a - 1 })
            .collect();
        let symbolizer = Symbolizer::new();
        let src = Source::Process(Process::new(Pid::from(pid)));
        let names: Vec<String> = symbolizer
            .symbolize(&src, Input::AbsAddr(&lookup))
            .expect("symbolize")
            .iter()
            .map(|s| s.as_sym().map_or("?".into(), |s| s.name.to_string()))
            .collect();
        // the function that took the copy, its caller, and on through the
        // test harness (the test itself may be inlined) to the thread's entry
        assert!(names[0].contains("copy_here"), "{names:?}");
        assert!(names[1].contains("unwind_marker_outer"), "{names:?}");
        assert!(
            names[2..]
                .iter()
                .any(|n| n.contains("start_thread") || n.starts_with("clone")),
            "{names:?}"
        );
        // the executable is a known file mapping
        let exe = std::fs::read_link("/proc/self/exe").expect("exe");
        assert_eq!(
            unwinding.file_at(pid, unwound.addrs[1] - 1).as_deref(),
            exe.to_str()
        );
    }

    #[test]
    fn a_copy_that_ends_at_the_stack_pointer_unwinds_one_frame_at_most() {
        let mut copy = unwind_marker_outer();
        copy.data.clear();
        let unwound = Unwinding::new()
            .unwind(std::process::id(), &copy)
            .expect("own memory map");
        assert_eq!(unwound.addrs.first(), Some(&copy.ip));
        // arm64 may still find the caller in the link register
        assert!(unwound.addrs.len() <= 2, "{unwound:?}");
        assert!(!unwound.complete);
    }
}
