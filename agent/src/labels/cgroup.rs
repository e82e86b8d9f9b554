//! Cgroup v2 id -> path, for the `cgroup` label.
//!
//! The BPF side records `bpf_get_current_cgroup_id()`, the id of the task's
//! cgroup in the v2 (unified) hierarchy, which is the inode number of that
//! cgroup's directory in cgroup2fs. We map ids back to paths by walking the
//! cgroup2 mount on a miss, at most once per round (one refresh of the
//! kernel tables): a cgroup exists before any task in it runs, so a walk
//! made after its id was seen finds it unless it was already removed.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use tracing::{debug, warn};

/// Label value of an id whose directory was not found (cgroup removed before
/// any walk saw it).
pub const UNKNOWN: &str = "unknown";
/// Cache bound: past this many ids, ids of removed cgroups are forgotten.
const MAX_CACHED: usize = 65_536;

/// Resolves cgroup v2 ids to paths relative to the cgroup2 root ("/" is the root).
pub struct CgroupResolver {
    root: Option<PathBuf>,
    paths: HashMap<u64, String>,
    walked_this_round: bool,
}

impl CgroupResolver {
    /// Finds the cgroup2 mount in `/proc/self/mountinfo`. Without one (a
    /// cgroup v1-only host) every process is in the v2 root, labelled "/".
    pub fn new() -> Self {
        let root = fs::read_to_string("/proc/self/mountinfo")
            .ok()
            .and_then(|text| cgroup2_mount(&text));
        match &root {
            Some(root) => debug!(root = %root.display(), "cgroup2 mount"),
            None => warn!("no cgroup2 mount found: the cgroup label will be \"/\""),
        }
        Self {
            root,
            paths: HashMap::new(),
            walked_this_round: false,
        }
    }

    /// Start a round: the next miss may walk the tree again.
    pub fn new_round(&mut self) {
        self.walked_this_round = false;
    }

    /// Path of cgroup `id`, e.g. `/system.slice/cron.service`.
    pub fn resolve(&mut self, id: u64) -> String {
        if let Some(path) = self.paths.get(&id) {
            return path.clone();
        }
        let Some(root) = self.root.clone() else {
            return "/".to_string();
        };
        if !self.walked_this_round {
            self.walk(&root);
        }
        self.paths
            .get(&id)
            .cloned()
            .unwrap_or_else(|| UNKNOWN.to_string())
    }

    /// Remember the path of cgroup `id`, recorded by the kernel when the
    /// cgroup was made (`cgroup_events`): a cgroup removed before any walk
    /// then keeps its name. The kernel's path is relative to the cgroup
    /// namespace of the task that made it; a path found by a walk wins.
    pub fn learn(&mut self, id: u64, path: String) {
        if self.root.is_none() {
            return;
        }
        if self.paths.len() > MAX_CACHED {
            self.paths.clear();
        }
        self.paths.entry(id).or_insert(path);
    }

    /// Whether the cgroup at `path` (as [`resolve`](Self::resolve) returns
    /// it) still exists; `unknown` never does.
    pub fn exists(&self, path: &str) -> bool {
        match &self.root {
            None => path == "/",
            Some(_) if !path.starts_with('/') => false,
            Some(root) => root.join(path.trim_start_matches('/')).is_dir(),
        }
    }

    fn walk(&mut self, root: &Path) {
        self.walked_this_round = true;
        if self.paths.len() > MAX_CACHED {
            self.paths.clear();
        }
        let mut stack = vec![(root.to_path_buf(), String::from("/"))];
        while let Some((dir, rel)) = stack.pop() {
            // Cgroups come and go while we walk: skip what vanished.
            let Ok(meta) = fs::metadata(&dir) else {
                continue;
            };
            self.paths.insert(meta.ino(), rel.clone());
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    let child = if rel == "/" {
                        format!("/{name}")
                    } else {
                        format!("{rel}/{name}")
                    };
                    stack.push((entry.path(), child));
                }
            }
        }
    }
}

/// Mount point of the first cgroup2 filesystem in a mountinfo text,
/// preferring `/sys/fs/cgroup` itself (pure v2) over `/sys/fs/cgroup/unified`
/// (hybrid).
pub fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fstype = right.split_whitespace().next()?;
            let mount_point = left.split_whitespace().nth(4)?;
            (fstype == "cgroup2").then(|| PathBuf::from(unescape_octal(mount_point)))
        })
        .collect();
    found.sort_by_key(|p| p != Path::new("/sys/fs/cgroup"));
    found.into_iter().next()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_octal(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = std::str::from_utf8(&bytes[i + 1..i + 4]).ok();
            if let Some(v) = digits.and_then(|d| u8::from_str_radix(d, 8).ok()) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
24 30 0:22 / /sys rw,nosuid shared:7 - sysfs sysfs rw
31 24 0:26 / /sys/fs/cgroup ro shared:9 - tmpfs tmpfs ro,mode=755
32 31 0:27 / /sys/fs/cgroup/unified rw shared:10 - cgroup2 cgroup2 rw,nsdelegate
33 31 0:28 / /sys/fs/cgroup/systemd rw shared:11 - cgroup cgroup rw,name=systemd
";

    #[test]
    fn finds_unified_mount_on_hybrid_hosts() {
        assert_eq!(
            cgroup2_mount(HYBRID),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
    }

    #[test]
    fn prefers_sys_fs_cgroup_and_handles_v1_only() {
        let v2 = "40 24 0:30 / /host/cg rw - cgroup2 cgroup2 rw\n\
                  41 24 0:31 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(cgroup2_mount(v2), Some(PathBuf::from("/sys/fs/cgroup")));
        let v1 = "33 31 0:28 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
        assert_eq!(cgroup2_mount(v1), None);
    }

    #[test]
    fn unescapes_mount_points() {
        assert_eq!(unescape_octal(r"/mnt/my\040cg"), "/mnt/my cg");
        assert_eq!(unescape_octal("/plain"), "/plain");
    }

    #[test]
    fn walk_maps_inode_numbers_to_relative_paths() {
        let dir = std::env::temp_dir().join(format!("slowpath-cg-test-{}", std::process::id()));
        fs::create_dir_all(dir.join("a.slice/b.scope")).unwrap();
        let mut r = CgroupResolver {
            root: Some(dir.clone()),
            paths: HashMap::new(),
            walked_this_round: false,
        };
        let ino = fs::metadata(dir.join("a.slice/b.scope")).unwrap().ino();
        let root_ino = fs::metadata(&dir).unwrap().ino();
        assert_eq!(r.resolve(ino), "/a.slice/b.scope");
        assert_eq!(r.resolve(root_ino), "/");
        assert_eq!(r.resolve(u64::MAX), UNKNOWN);
        fs::remove_dir_all(&dir).unwrap();
    }
}
