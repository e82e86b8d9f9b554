//! The node's online CPUs, for `slowpath_node_cpus`: what the own-cost
//! alert divides slowpath's CPU by (`SlowpathOverheadHigh` judges a share
//! of the node, not of one CPU). Read from the host's sysfs
//! (`devices/system/cpu/online` under `--path.sysfs`), not from the
//! agent's own cgroup or cpuset, which a container limits.

use std::path::Path;

/// CPUs online on the node: the count of `devices/system/cpu/online` under
/// `sysfs` (a list of ranges, `0-3,8-11`). `None` when the file cannot be
/// read or parsed.
pub fn online(sysfs: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(sysfs.join("devices/system/cpu/online")).ok()?;
    count_list(&text)
}

/// The number of CPUs in a kernel CPU list (`Documentation/admin-guide/
/// cputopology.rst`: comma-separated CPUs and ranges): `0-1,4,6-7` is 5.
/// `None` for an empty or malformed list.
fn count_list(text: &str) -> Option<u32> {
    let mut total = 0u32;
    for part in text.trim().split(',') {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
            None => {
                let cpu = part.parse::<u32>().ok()?;
                (cpu, cpu)
            }
        };
        total += last.checked_sub(first)? + 1;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_single_cpus_are_counted() {
        assert_eq!(count_list("0-1\n"), Some(2));
        assert_eq!(count_list("0"), Some(1));
        assert_eq!(count_list("0-1,4,6-7\n"), Some(5));
        assert_eq!(count_list(""), None);
        assert_eq!(count_list("3-1"), None);
        assert_eq!(count_list("x"), None);
    }

    #[test]
    fn this_machine_has_at_least_one() {
        assert!(online(Path::new("/sys")).is_some_and(|n| n >= 1));
    }
}
