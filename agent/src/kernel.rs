//! Facts about the running kernel: its release and whether slowpath runs on
//! it. A leaf: depends on nothing else of the agent, so the preflight checks,
//! the locked-memory settling and the load-error explanations can all ask it.

/// The oldest kernel slowpath runs on: process exits reach the agent
/// through the BPF ring buffer, and CAP_BPF and CAP_PERFMON exist, from 5.8.
const MIN_KERNEL: (u32, u32) = (5, 8);

/// Major and minor of a kernel release (`6.1.0-18-amd64` gives (6, 1));
/// `None` when it does not start with them.
pub fn version(release: &str) -> Option<(u32, u32)> {
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .map(str::parse::<u32>);
    let major = numbers.next()?.ok()?;
    let minor = numbers.next()?.ok()?;
    Some((major, minor))
}

/// The plain statement for a kernel `release` older than 5.8; `None` for
/// a newer one or a release that cannot be read.
pub fn too_old(release: &str) -> Option<String> {
    let version = version(release)?;
    (version < MIN_KERNEL).then(|| {
        format!(
            "slowpath needs Linux {}.{} or newer (BPF ring buffer, CAP_BPF); this kernel is \
             {release}: upgrade the kernel",
            MIN_KERNEL.0, MIN_KERNEL.1
        )
    })
}

/// The running kernel's release (`uname -r`).
pub fn release() -> Option<String> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    Some(release.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_releases_older_than_5_8_are_named_with_the_fix() {
        assert_eq!(version("6.1.0-18-amd64"), Some((6, 1)));
        assert_eq!(version("4.18.0-513.el8.x86_64"), Some((4, 18)));
        assert_eq!(version("5.10"), Some((5, 10)));
        assert_eq!(version("5"), None);
        assert_eq!(version("linux"), None);
        assert_eq!(
            too_old("5.4.0-150-generic").as_deref(),
            Some(
                "slowpath needs Linux 5.8 or newer (BPF ring buffer, CAP_BPF); this kernel is \
                 5.4.0-150-generic: upgrade the kernel"
            )
        );
        assert!(too_old("4.19.0-26-amd64").is_some());
        assert!(too_old("3.10.0-1160.el7.x86_64").is_some());
        for fine in ["5.8.0", "5.10.0-28-amd64", "6.18.0", "10.0.1", "unparsable"] {
            assert_eq!(too_old(fine), None, "{fine}");
        }
    }
}
